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

// clusterReplicaOf returns the replica of master among cl's nodes (ROLE).
func clusterReplicaOf(t *testing.T, cl *redistest.Cluster, master *redistest.Server) *redistest.Server {
	t.Helper()
	for _, n := range cl.Nodes {
		if n == master || n.PID() == 0 {
			continue
		}
		role, err := n.Client(t).Do(t.Context(), "role").Slice()
		if err == nil && len(role) >= 3 && role[0] == "slave" && role[2] == int64(master.Port) {
			return n
		}
	}
	t.Fatalf("no replica of %s", master.Addr())
	return nil
}

// TestMinReplicasClusterFailover: with MinReplicas, grants and renewals go
// straight to the key's master with WAIT after them. After a clean CLUSTER
// FAILOVER, the old master answers MOVED; the client's slot map is only
// reloaded every minute (go-redis's default), so the MOVED must be
// followed: grants resume at once, and a lock held across the failover is
// renewed on the new master, not lost.
func TestMinReplicasClusterFailover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cl := redistest.StartCluster(t, redistest.ClusterConfig{Replicas: 1})
	o := cl.ClusterOptions()
	o.ClusterStateReloadInterval = 0 // go-redis's default: a minute
	o.ContextTimeoutEnabled = true
	cc := redis.NewClusterClient(o)
	c, err := dlock.New(cc, dlock.Options{MinReplicas: 1, ReplicaTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = cc.Close()
	})
	held, free := "{mrfo}:held", "{mrfo}:free"
	lk, err := c.Lock(ctx, held, dlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := c.TryLock(ctx, free); err != nil {
		t.Fatal(err)
	} else if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	master, err := cl.MasterOf(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	replica := clusterReplicaOf(t, cl, master)
	if _, err := cl.ManualFailover(ctx, t, replica, held, master); err != nil {
		t.Fatal(err)
	}

	// The lock held across the failover: its renewals (every second) reach
	// the new master. (First, before any acquire: an acquire can make the
	// Client reload the slot map for other reasons.)
	time.Sleep(4 * time.Second) // past the deadline of the last pre-failover renewal
	if err := lk.Err(); err != nil {
		t.Fatalf("the lock held across the failover was lost: %v", err)
	}

	// Grants on the moved slot: the first TryLock follows the MOVED.
	start := time.Now()
	var l *dlock.Lock
	var lastErr error
	for l == nil && time.Since(start) < 5*time.Second {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		l, lastErr = c.TryLock(actx, free)
		acancel()
		if l == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if l == nil {
		t.Fatalf("no grant within 5s: %v", lastErr)
	}
	t.Logf("held lock renewed across the failover; first grant after it took %v", time.Since(start).Round(time.Millisecond))
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lk.Extend(ctx, 3*time.Second); err != nil {
		t.Fatalf("Extend after the failover: %v", err)
	}
	if err := lk.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrReleased) {
		t.Fatal(err)
	}
}
