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
// arguments boxed once, built in storage of its own or in an ArgBuf, is
// the command of its acquireCall, in every mode and for any TTL; and its
// release's is that of its Release call.
func TestTokenLockBoxedArgs(t *testing.T) {
	ks := protocol.Keys{Lock: "k", Fence: "f", Wake: "w", Queue: "q", Waiters: "ws", Tombs: "ts"}
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
			want := commandOf(scripts.Acquire.Hash(), p.acquireCall(engine.Attempt{Mode: m, Queue: q}, ks, "tok", ttl))
			if got := fmt.Sprint(p.acquireRaw(m, ks, "tok", ttl, nil).Args); got != want {
				t.Errorf("mode %v, TTL %v: acquire sends %q, want %q", m, ttl, got, want)
			}
			buf := &engine.ArgBuf{Keys: &ks, Value: "tok"}
			if got := fmt.Sprint(p.acquireRaw(m, ks, "tok", ttl, buf).Args); got != want {
				t.Errorf("mode %v, TTL %v: acquire built in an ArgBuf sends %q, want %q", m, ttl, got, want)
			}
		}
	}
	want := commandOf(scripts.Release.Hash(), p.Release(ks, "tok"))
	if got := fmt.Sprint(p.releaseRaw(ks, "tok", nil).Args); got != want {
		t.Errorf("release sends %q, want %q", got, want)
	}
	buf := &engine.ArgBuf{Keys: &ks, Value: "tok"}
	if got := fmt.Sprint(p.releaseRaw(ks, "tok", buf).Args); got != want {
		t.Errorf("release built in an ArgBuf sends %q, want %q", got, want)
	}
}
