package dlock

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
)

// TestTokenLockBoxedArgs: the EVALSHA command a token lock sends with its
// arguments boxed once is the command of its acquireCall, in every mode
// and for any TTL.
func TestTokenLockBoxedArgs(t *testing.T) {
	ks := protocol.Keys{Lock: "k", Fence: "f", Wake: "w", Queue: "q"}
	commandOf := func(sha string, c protocol.Call) string {
		args := []any{"evalsha", sha, len(c.Keys)}
		for _, k := range c.Keys {
			args = append(args, k)
		}
		return fmt.Sprint(append(args, c.Args...))
	}
	q := &engine.Queue{Channel: "ch", Lease: time.Second, Pickup: 2 * time.Second}
	p := tokenLock{q: q, args: newTokenArgs(q, 10*time.Second)}
	for _, m := range engine.Modes {
		for _, ttl := range []time.Duration{10 * time.Second, 5 * time.Second} {
			got := fmt.Sprint(p.acquireRaw(m, ks, "tok", ttl).Args)
			if want := commandOf(scripts.Acquire.Hash(), p.acquireCall(engine.Attempt{Mode: m, Queue: q}, ks, "tok", ttl)); got != want {
				t.Errorf("mode %v, TTL %v: acquire sends %q, want %q", m, ttl, got, want)
			}
		}
	}
}
