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

// TestUnlockOnKilledClusterMaster: the master holding a lock is killed
// (SIGKILL) just before Unlock. Unlock keeps sending the release, within
// ReleaseTimeout, until the slot's replica is promoted and the release
// runs there: the key is freed on the new master and a waiter gets it
// long before the lock's TTL, instead of the key staying held by nobody
// until then.
func TestUnlockOnKilledClusterMaster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, redistest.ClusterConfig{Replicas: 1})
	unlockOnKilledMaster(t, "{relfo}:k", "{relfo}:synced", 1, func() redis.UniversalClient {
		o := cl.ClusterOptions()
		o.ClusterStateReloadInterval = 0 // go-redis's default: a minute
		o.ContextTimeoutEnabled = true
		return redis.NewClusterClient(o)
	}, cl.MasterOf)
}

// TestUnlockOnKilledSentinelMaster: the same through a Sentinel failover
// client (1 master, 2 replicas, 3 sentinels).
func TestUnlockOnKilledSentinelMaster(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, redistest.SentinelConfig{})
	unlockOnKilledMaster(t, "relfo", "relfo:synced", 2, func() redis.UniversalClient {
		o := s.FailoverOptions()
		o.ContextTimeoutEnabled = true
		return redis.NewFailoverClient(o)
	}, func(ctx context.Context, _ string) (*redistest.Server, error) { return s.Master(ctx) })
}

// unlockOnKilledMaster holds k, queues a waiter on it, kills k's master
// (once its replicas have the grant: see waitReplicated, with synced a
// key in k's slot) and unlocks: Unlock must answer released, and the
// waiter get k well before the TTL.
func unlockOnKilledMaster(t *testing.T, k, synced string, replicas int, newRDB func() redis.UniversalClient,
	masterOf func(context.Context, string) (*redistest.Server, error)) {
	ctx := t.Context()
	// After the Clients close: go-redis re-dials the dead node's pool once
	// a second, and notices the pool was closed only after that sleep.
	t.Cleanup(func() { time.Sleep(1500 * time.Millisecond) })
	newClient := func() *dlock.Client {
		rdb := newRDB()
		// A failover on a loaded machine can take several seconds.
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
	const ttl = 30 * time.Second
	lk, err := a.Lock(ctx, k, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	master, err := masterOf(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	// The grant reached the replicas.
	if n, err := waitReplicated(ctx, master.Client(t), synced, replicas); err != nil || n != replicas {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
	got := make(chan time.Time, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 2*ttl)
		defer cancel()
		l, err := b.Lock(wctx, k, dlock.WithTTL(ttl))
		if err != nil {
			t.Errorf("waiter: %v", err)
			close(got)
			return
		}
		got <- time.Now()
		_ = l.Unlock(context.WithoutCancel(ctx))
	}()
	queued(t, b)
	killed := time.Now()
	if err := master.Kill(); err != nil {
		t.Fatal(err)
	}
	uctx, cancel := context.WithTimeout(ctx, 25*time.Second)
	defer cancel()
	uerr := lk.Unlock(uctx)
	unlocked := time.Since(killed)
	if uerr != nil {
		t.Fatalf("Unlock across the failover = %v, want nil", uerr)
	}
	select {
	case at, ok := <-got:
		if !ok {
			return
		}
		t.Logf("Unlock returned %v after the kill; the waiter got the key %v after it (TTL %v)",
			unlocked.Round(time.Millisecond), at.Sub(killed).Round(time.Millisecond), ttl)
	case <-time.After(ttl / 2):
		t.Fatalf("the waiter did not get the key within %v of the kill: the release did not reach the promoted replica", ttl/2)
	}
}

// waitReplicated writes key on rdb's node and then sends WAIT replicas on
// the same connection, and returns the replicas that acknowledged: they
// have every write the node made before, the grant of a lock among them.
// A WAIT alone would not tell: it waits for the last write of its own
// connection, and on a connection that wrote nothing it answers at once
// with every replica connected, whatever it has received (Redis 7.0 and
// Valkey 8 alike).
func waitReplicated(ctx context.Context, rdb *redis.Client, key string, replicas int) (int, error) {
	var wait *redis.Cmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, "1", time.Minute)
		wait = p.Do(ctx, "wait", replicas, 5000)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return wait.Int()
}

// An Unlock that cannot reach Redis within ReleaseTimeout returns
// ErrUnavailable; once the lock's deadline passes, Stats counts the
// release as left to expire.
func TestUnlockGivesUpCountsReleaseLeft(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	c, _ := newClientOn(t, rdb, dlock.Options{ReleaseTimeout: 300 * time.Millisecond})
	lk, err := c.Lock(t.Context(), "left", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Unlock on a dead server = %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("Unlock gave up after %v, before ReleaseTimeout", took)
	}
	if n := c.Stats().ReleasesLeft; n != 0 && time.Now().Before(lk.Deadline()) {
		t.Fatalf("ReleasesLeft = %d before the deadline, want 0", n)
	}
	for end := time.Now().Add(10 * time.Second); c.Stats().ReleasesLeft == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("ReleasesLeft still 0 long after the lock's deadline")
		}
	}
}
