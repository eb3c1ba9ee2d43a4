package dlock_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestSentinelFailoverUnderLoad measures a graceful SENTINEL FAILOVER (1
// master, 2 replicas, 3 sentinels) under 8 Clients × 8 workers on 32 keys
// (TTL 10 s, 1 ms critical sections), with MinReplicas 0, 1 and 2 (every
// replica): for each key, the longest time without a grant from the
// promotion on. It runs only with DLOCK_FAILOVER_BENCH=1.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	if os.Getenv("DLOCK_FAILOVER_BENCH") == "" {
		t.Skip("set DLOCK_FAILOVER_BENCH=1 to measure")
	}
	for _, mr := range []int{0, 1, 2} {
		r := sentinelFailoverLoad(t, mr)
		t.Logf("MinReplicas %d: grants %d; after the promotion: keys without a grant for over 1 s %d of 32, longest %v; every key granted again %v after it; failed Locks %d, failed Unlocks %d",
			mr, r.grants, r.stalled, r.longest.Round(time.Millisecond), r.allBack.Round(time.Millisecond), r.lockErrs, r.unlockErrs)
	}
}

type failoverLoad struct {
	grants, lockErrs, unlockErrs, stalled int
	longest, allBack                      time.Duration
}

func sentinelFailoverLoad(t *testing.T, minReplicas int) failoverLoad {
	ctx := t.Context()
	s := redistest.StartSentinel(t, redistest.SentinelConfig{})
	defer func() { _ = s.Close() }()
	old, err := s.WaitSettled(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const clients, workers, keys, ttl = 8, 8, 32, 10 * time.Second
	opts := dlock.Options{MinReplicas: minReplicas, ReplicaTimeout: 100 * time.Millisecond, ReleaseTimeout: 20 * time.Second}
	cs := make([]*dlock.Client, clients)
	for i := range cs {
		fo := s.FailoverOptions()
		fo.ContextTimeoutEnabled = true
		rdb := redis.NewFailoverClient(fo)
		c, err := dlock.New(rdb, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close(); _ = rdb.Close() }()
		cs[i] = c
	}
	var mu sync.Mutex
	grants := make([][]time.Time, keys)
	var r failoverLoad
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range clients * workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs[w%clients]
			for i := w; runCtx.Err() == nil; i++ {
				k := i % keys
				lctx, cancel := context.WithTimeout(runCtx, 2*ttl)
				l, err := c.Lock(lctx, fmt.Sprintf("sfo-%d", k), dlock.WithTTL(ttl))
				cancel()
				mu.Lock()
				if err != nil {
					r.lockErrs++
				} else {
					grants[k] = append(grants[k], time.Now())
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				time.Sleep(time.Millisecond)
				uctx, ucancel := context.WithTimeout(context.Background(), 25*time.Second)
				if err := l.Unlock(uctx); err != nil {
					mu.Lock()
					r.unlockErrs++
					mu.Unlock()
				}
				ucancel()
			}
		}()
	}
	time.Sleep(2 * time.Second)
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.SentinelAddrs()[0]})
	defer sc.Close()
	if err := sc.Failover(ctx, redistest.MasterName).Err(); err != nil {
		t.Fatal(err)
	}
	promoted := waitPromoted(t, s, old)
	time.Sleep(20 * time.Second)
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, gs := range grants {
		r.grants += len(gs)
		last, back := promoted, time.Duration(-1)
		gap := time.Duration(0)
		for _, g := range gs {
			if g.Before(promoted) {
				continue
			}
			gap = max(gap, g.Sub(last))
			if back < 0 {
				back = g.Sub(promoted)
			}
			last = g
		}
		if back < 0 {
			back = 20 * time.Second
			gap = back
		}
		r.longest, r.allBack = max(r.longest, gap), max(r.allBack, back)
		if gap > time.Second {
			r.stalled++
		}
	}
	return r
}

// waitPromoted waits for a node other than old to answer ROLE as master
// and returns when it did.
func waitPromoted(t *testing.T, s *redistest.Sentinel, old *redistest.Server) time.Time {
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		for _, n := range s.Nodes {
			if n == old {
				continue
			}
			if r, err := n.Client(t).Do(t.Context(), "role").Slice(); err == nil && len(r) > 0 && r[0] == "master" {
				return time.Now()
			}
		}
	}
	t.Fatal("no replica was promoted")
	return time.Time{}
}
