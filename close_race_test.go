package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// An Unlock that failed (Redis unreachable) leaves the lock held until its
// deadline, no longer renewed. Close, which stops the watchdog that would
// have ended it there, releases it like any other lock it holds, so its
// Done closes and the key is freed, rather than Done staying open for
// good.
func TestCloseReleasesLockWhoseUnlockFailed(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	c, _ := newClientOn(t, rdb, dlock.Options{ReleaseTimeout: 10 * time.Second})
	const ttl = 10 * time.Second
	k := key(t)
	lk, err := c.TryLock(t.Context(), k, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	done := lk.Done()

	p.Blackhole(true)
	uctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	err = lk.Unlock(uctx)
	cancel()
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Unlock with Redis unreachable = %v, want ErrUnavailable", err)
	}
	p.Blackhole(false)
	p.CutAll() // the connection the blackhole left mid-stream

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Generous: well past the lock's deadline, where the watchdog would
	// have ended it had the Client stayed open.
	select {
	case <-done:
	case <-time.After(ttl + 20*time.Second):
		t.Fatalf("Done still open long after Close and the lock's deadline (Err %v)", lk.Err())
	}
	if err := lk.Err(); !errors.Is(err, dlock.ErrReleased) {
		t.Fatalf("Err after Close = %v, want ErrReleased", err)
	}
	if n := s.Client(t).Exists(t.Context(), k).Val(); n != 0 {
		t.Fatal("Close left the lock key in Redis")
	}
	if h := c.Stats().Held; h != 0 {
		t.Fatalf("Stats().Held %d after Close", h)
	}
}
