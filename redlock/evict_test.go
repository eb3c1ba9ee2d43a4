package redlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/redlock"
)

// TestEvictingNode: a node that may evict keys is found by CheckServers
// and by Acquire's background probe, and every later acquire fails with
// ErrEvictionPolicy naming it, although the Client's own node (nodes[0])
// does not evict; AllowEviction lets the locks through.
func TestEvictingNode(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ev := redistest.Start(t, redistest.Config{ExtraArgs: []string{"--maxmemory", "100mb", "--maxmemory-policy", "volatile-ttl"}})
	servers := []*redistest.Server{shared[0], shared[1], ev}

	s := newSet(t, servers, redlock.Options{}, dlock.Options{})
	err := s.p.CheckServers(ctx)
	if !errors.Is(err, dlock.ErrEvictionPolicy) || !strings.Contains(err.Error(), ev.Addr()+" has volatile-ttl") {
		t.Fatalf("CheckServers: %v, want ErrEvictionPolicy naming %s", err, ev.Addr())
	}
	if _, err := s.c.TryLock(ctx, "evict:redlock", dlock.WithProtocol(s.p)); !errors.Is(err, dlock.ErrEvictionPolicy) {
		t.Fatalf("TryLock after CheckServers: %v, want ErrEvictionPolicy", err)
	}

	// Without CheckServers: the probe that the first acquires start finds it.
	s2 := newSet(t, servers, redlock.Options{}, dlock.Options{})
	deadline := time.Now().Add(10 * time.Second)
	for {
		lk, err := s2.c.TryLock(ctx, "evict:redlock2", dlock.WithProtocol(s2.p))
		if errors.Is(err, dlock.ErrEvictionPolicy) {
			break
		}
		if err == nil {
			_ = lk.Unlock(ctx)
		}
		if time.Now().After(deadline) {
			t.Fatalf("acquires still not refused after 10s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	ok := newSet(t, servers, redlock.Options{}, dlock.Options{AllowEviction: true})
	if err := ok.p.CheckServers(ctx); err != nil {
		t.Fatalf("CheckServers with AllowEviction: %v", err)
	}
	lk, err := ok.c.TryLock(ctx, "evict:redlock3", dlock.WithProtocol(ok.p))
	if err != nil {
		t.Fatalf("TryLock with AllowEviction: %v", err)
	}
	_ = lk.Unlock(ctx)
}
