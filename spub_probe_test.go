package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A Barging waiter on a Cluster listens on its key's wake-up channel
// only, on the sharded connection to the key's master: that connection
// has the liveness probe too (its Client's channel of the key's slot is
// subscribed for it). With the probes' SPUBLISHes answered but never
// delivered, the Client replaces the connection and wakes the waiter; the
// new connection hears the release after it, and once the waiter is
// gone no channel stays subscribed.
func TestShardedProbeBarging(t *testing.T) {
	t.Parallel()
	const every = 200 * time.Millisecond
	cl := redistest.StartCluster(t, redistest.ClusterConfig{})
	rdb := cl.NewClient()
	h := &probeHook{}
	rdb.AddHook(h)
	c, err := dlock.New(rdb, dlock.Options{Barging: true, RetryInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })
	dlock.SetPubSubProbe(c, every, every)
	other := newClusterDlock(t, cl, dlock.Options{})
	ctx := t.Context()
	const k = "spub-probe-barging"
	held, err := other.Lock(ctx, k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, k)
		if err == nil {
			err = l.Unlock(context.Background())
		}
		done <- err
	}()
	waitFor(t, "the waiter", func() bool { return c.Stats().Waiting == 1 })

	h.swallow.Store(true)
	for deadline := time.Now().Add(20 * every); c.Stats().PubSubRedials == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no redial in %v with every probe swallowed: the barging waiter's connection is not probed", 20*every)
		}
	}
	h.swallow.Store(false)
	time.Sleep(4 * every) // the new connection's subscriptions are confirmed
	redials := c.Stats().PubSubRedials
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the release was not heard on the new sharded connection (the retry is a minute away)")
	}
	if n := c.Stats().PubSubRedials; n != redials {
		t.Errorf("%d more redials with the probes delivered", n-redials)
	}
	// Without waiters, the channel kept for the probe is unsubscribed too.
	waitFor(t, "no shard channel left", func() bool {
		for _, n := range cl.Nodes {
			if len(n.Client(t).PubSubShardChannels(ctx, "*").Val()) > 0 {
				return false
			}
		}
		return true
	})
}
