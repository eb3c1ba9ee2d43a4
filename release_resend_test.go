package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestUnlockInSentinelFailoverWindowResent: without MinReplicas, a
// graceful SENTINEL FAILOVER promotes the replica and the Client unlocks
// before it has switched: the old master accepts the release and loses it
// when it rejoins as a replica. Once the Client dials the new master, it
// sends its recent releases again (Options.ReleaseResendWindow): the new
// master frees the key, and another Client gets it, long before the
// lock's TTL.
func TestUnlockInSentinelFailoverWindowResent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := redistest.StartSentinel(t, redistest.SentinelConfig{Replicas: 1})
	newClient := func() *dlock.Client {
		fo := s.FailoverOptions()
		fo.ContextTimeoutEnabled = true
		rdb := redis.NewFailoverClient(fo)
		c, err := dlock.New(rdb, dlock.Options{ReleaseTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Close()
			_ = rdb.Close()
		})
		return c
	}
	a, b := newClient(), newClient()
	const k, ttl = "sentresend", 10 * time.Second
	old, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	replica := s.Nodes[0]
	if replica == old {
		replica = s.Nodes[1]
	}
	// A release resent late must leave a key another Client holds since
	// alone: a released k2, now b's.
	k2 := k + "-taken"
	if l, err := a.Lock(ctx, k2, dlock.WithTTL(ttl)); err != nil || l.Unlock(ctx) != nil {
		t.Fatalf("k2: Lock %v", err)
	}
	taken, err := b.Lock(ctx, k2, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	lk, err := a.Lock(ctx, k, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.SentinelAddrs()[0]})
	defer sc.Close()
	if err := sc.Failover(ctx, redistest.MasterName).Err(); err != nil {
		t.Fatal(err)
	}
	rc := replica.Client(t)
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if r, err := rc.Do(ctx, "role").Slice(); err == nil && len(r) > 0 && r[0] == "master" {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the replica was not promoted")
		}
	}
	promoted := time.Now()
	uerr := lk.Unlock(ctx) // most likely on the old master, still answering as one
	for end := promoted.Add(ttl / 2); ; time.Sleep(10 * time.Millisecond) {
		if n, err := rc.Exists(ctx, k).Result(); err == nil && n == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the new master still holds the key %v after the promotion (Unlock: %v): the release was lost with the old master", ttl/2, uerr)
		}
	}
	freed := time.Since(promoted)
	time.Sleep(2 * time.Second) // the resend's passes are over
	if err := taken.Err(); err != nil {
		t.Errorf("the lock b took after a's release of k2: %v", err)
	}
	if n, err := rc.Exists(ctx, k2).Result(); err != nil || n != 1 {
		t.Errorf("k2 on the new master: exists %d, %v; want b's lock", n, err)
	}
	_ = taken.Unlock(ctx)
	if _, err := s.WaitFailover(ctx, old); err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithTimeout(ctx, ttl/2)
	defer lcancel()
	l, err := b.Lock(lctx, k, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("Lock after the failover: %v", err)
	}
	_ = l.Unlock(ctx)
	t.Logf("the new master freed the key %v after the promotion; Unlock: %v; Stats.ReleasesResent %d",
		freed.Round(time.Millisecond), uerr, a.Stats().ReleasesResent)
}
