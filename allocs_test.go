package dlock_test

import (
	"fmt"
	"testing"

	"github.com/dlock-go/dlock"
)

// An uncontended Lock+Unlock with the library defaults allocates little
// beyond what go-redis needs for its two commands (12 allocations: the
// commands, their replies, the pool's connection checks). 15 are
// measured: the engine's own share is the acquiring call, the lock, and
// its keys. The commands' arguments are built in storage the call and the
// lease own, the hook context is made on first use: this bound catches a
// change that brings a per-call allocation back.
func TestLockUnlockAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	c, _ := newClient(t, dlock.Options{})
	ctx := t.Context()
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", key(t), i)
	}
	i := 0
	pair := func() {
		lk, err := c.Lock(ctx, keys[i%len(keys)])
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		i++
	}
	for range 100 {
		pair() // scripts loaded, connections dialled
	}
	const bound = 16
	if n := testing.AllocsPerRun(500, pair); n > bound {
		t.Errorf("Lock+Unlock: %.1f allocations per pair, want at most %d", n, bound)
	}
}
