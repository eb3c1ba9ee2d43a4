package dlock_test

import (
	"fmt"
	"testing"

	"github.com/dlock-go/dlock"
)

// An uncontended Lock+Unlock with the library defaults allocates little
// beyond what go-redis needs for its two commands (about 14 allocations):
// the engine's own share was 35 before its allocations were cut, and this
// bound catches a change that brings a per-call allocation back. 31 are
// measured: the acquire's five keys and the release's four (the lock
// key, the queue, its waiters and its tombstones) each cost go-redis one
// boxed argument.
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
	const bound = 32
	if n := testing.AllocsPerRun(500, pair); n > bound {
		t.Errorf("Lock+Unlock: %.1f allocations per pair, want at most %d", n, bound)
	}
}
