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

// TestUnlockInSentinelFailoverWindow: a graceful SENTINEL FAILOVER
// promotes the replica, and the Client unlocks before it has switched to
// the new master: the old master accepts the release, which no replica
// will ever see. With MinReplicas, the release waits for the replica's
// acknowledgement, which the old master cannot get any more: the release
// is not confirmed, and sent again until it runs on the new master: the
// key is freed there long before the lock's TTL, instead of the new
// master keeping the released token until then, and another Client gets
// it.
func TestUnlockInSentinelFailoverWindow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := redistest.StartSentinel(t, redistest.SentinelConfig{Replicas: 1})
	newClient := func(o dlock.Options) *dlock.Client {
		fo := s.FailoverOptions()
		fo.ContextTimeoutEnabled = true
		rdb := redis.NewFailoverClient(fo)
		c, err := dlock.New(rdb, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Close()
			_ = rdb.Close()
		})
		return c
	}
	a := newClient(dlock.Options{MinReplicas: 1, ReplicaTimeout: 100 * time.Millisecond, ReleaseTimeout: 20 * time.Second})
	b := newClient(dlock.Options{})
	const k, ttl = "sentrel", 10 * time.Second
	old, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	replica := s.Nodes[0]
	if replica == old {
		replica = s.Nodes[1]
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
	// Unlock as soon as the replica answers as master: the Client learns
	// of the switch only later, from the sentinels.
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
	type result struct {
		took time.Duration
		err  error
	}
	unlocked := make(chan result, 1)
	go func() {
		uctx, cancel := context.WithTimeout(ctx, 25*time.Second)
		defer cancel()
		err := lk.Unlock(uctx)
		unlocked <- result{time.Since(promoted), err}
	}()
	// The new master drops the key well before its TTL.
	for end := promoted.Add(ttl / 2); ; time.Sleep(10 * time.Millisecond) {
		if n, err := rc.Exists(ctx, k).Result(); err == nil && n == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the new master still holds the key %v after the promotion: the release was lost with the old master", ttl/2)
		}
	}
	freed := time.Since(promoted)
	// The new master's replica is the old master, which the sentinels
	// turn into one only some seconds later: until then no replica
	// acknowledges the release, and Unlock may report that (or the
	// refusal or connection error of its last attempt, should the lock's
	// deadline come while the Client switches masters): ErrUnavailable,
	// not a release.
	u := <-unlocked
	if u.err != nil && !errors.Is(u.err, dlock.ErrUnavailable) {
		t.Errorf("Unlock across the failover = %v, want nil or ErrUnavailable", u.err)
	}
	// A Client that finds the new master through the sentinels gets the key.
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
	t.Logf("the new master freed the key %v after the promotion; Unlock returned %v after it (%v); TTL %v",
		freed.Round(time.Millisecond), u.took.Round(time.Millisecond), u.err, ttl)
}
