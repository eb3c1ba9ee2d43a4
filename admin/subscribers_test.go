package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/defaults"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Inspect counts a Barging waiter among the key's Subscribers on one
// server (PUBSUB NUMSUB) and on a Cluster, where dlock subscribes the
// key's wake-up channel by SSUBSCRIBE on the master of its slot (PUBSUB
// SHARDNUMSUB there); none once the waiter has the lock.
func TestInspectSubscribers(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		rdb := srv.NewClient()
		t.Cleanup(func() { _ = rdb.Close() })
		checkSubscribers(t, rdb, key(t))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, redistest.ClusterConfig{})
		rdb := cl.NewClient()
		t.Cleanup(func() { _ = rdb.Close() })
		checkSubscribers(t, rdb, "admin-subscribers")
	})
	// A plain subscription (another library's waiter) counts on whichever
	// node it was made: one on every node counts once per node.
	t.Run("cluster plain", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, redistest.ClusterConfig{})
		rdb := cl.NewClient()
		t.Cleanup(func() { _ = rdb.Close() })
		adm, err := admin.New(rdb, admin.Options{})
		if err != nil {
			t.Fatal(err)
		}
		k := "admin-plain-subscribers"
		wake := keyspace.Keys(defaults.Prefix, k).Wake
		for _, n := range cl.Nodes {
			nc := n.NewClient()
			ps := nc.Subscribe(t.Context(), wake)
			if _, err := ps.Receive(t.Context()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ps.Close(); _ = nc.Close() })
		}
		info, err := adm.Inspect(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(len(cl.Nodes)); info.Subscribers != want {
			t.Fatalf("Subscribers %d, want %d (one per node)", info.Subscribers, want)
		}
	})
}

func checkSubscribers(t *testing.T, rdb redis.UniversalClient, k string) {
	ctx := t.Context()
	holder, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	barger, err := dlock.New(rdb, dlock.Options{Barging: true, RetryInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close(); _ = barger.Close() })
	adm, err := admin.New(rdb, admin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	held, err := holder.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := barger.Lock(ctx, k)
		if err == nil {
			err = l.Unlock(context.Background())
		}
		done <- err
	}()
	subscribers := func(want int64) {
		t.Helper()
		var info admin.Info
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if info, err = adm.Inspect(ctx, k); err == nil && info.Subscribers == want {
				return
			}
		}
		t.Fatalf("Inspect: Subscribers %d (%v), want %d", info.Subscribers, err, want)
	}
	subscribers(1)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	subscribers(0)
}
