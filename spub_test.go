package dlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/redistest"
)

// spubOpts are the options of the sharded pub/sub tests' Clients: retry
// clocks far beyond the tests' deadlines, so a waiter that acquires in
// time was woken by a message, not by its retry.
var spubOpts = dlock.Options{RetryInterval: 30 * time.Second, WaiterLease: 90 * time.Second}

// spubWaiter starts a Lock of key on c and returns where its result
// comes, once the waiter is queued (c counts it waiting).
func spubWaiter(t *testing.T, c *dlock.Client, key string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		l, err := c.Lock(t.Context(), key, dlock.WithTTL(30*time.Second))
		if err == nil {
			err = l.Unlock(context.Background())
		}
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Waiting == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return done
}

// spubAwait waits for a waiter's result: within well under its retry
// clock (spubOpts), so only a message can have woken it.
func spubAwait(t *testing.T, done <-chan error, what string) {
	t.Helper()
	spubAwaitWithin(t, done, what, 12*time.Second)
}

// spubAwaitWithin is spubAwait with a bound of its own.
func spubAwaitWithin(t *testing.T, done <-chan error, what string, within time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(within):
		t.Fatalf("%s: the waiter was not woken within %v (its retry clock is 30 s)", what, within)
	}
}

// nodeCounter sums a counter of INFO commandstats or CLUSTER INFO over
// nodes.
func nodeCounter(t *testing.T, nodes []*redistest.Server, section, field string) int64 {
	t.Helper()
	var sum int64
	for _, n := range nodes {
		if n.PID() == 0 {
			continue
		}
		rc := n.NewClient()
		var text string
		var err error
		if section == "cluster" {
			text, err = rc.ClusterInfo(t.Context()).Result()
		} else {
			text, err = rc.Info(t.Context(), section).Result()
		}
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		sum += infoInt(text, field)
	}
	return sum
}

// infoInt reads field from INFO-style text: "field:N", or the calls= of a
// commandstats line "field:calls=N,...".
func infoInt(text, field string) int64 {
	for _, line := range strings.Split(text, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":")
		if !ok {
			continue
		}
		v = strings.TrimPrefix(v, "calls=")
		if i := strings.IndexByte(v, ','); i >= 0 {
			v = v[:i]
		}
		var n int64
		_, _ = fmt.Sscan(v, &n)
		return n
	}
	return 0
}

// On a Cluster, a hand-off goes by SPUBLISH on the waiter's Client
// channel of the key's slot, subscribed on that slot's master only: the
// waiter is woken at once (not by its retry clock), and no message
// crosses the cluster bus.
func TestShardedHandoff(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, redistest.ClusterConfig{})
	ctx := t.Context()
	a := newClusterDlock(t, cl, spubOpts)
	b := newClusterDlock(t, cl, spubOpts)
	const k = "spub-handoff"
	held, err := a.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	busBefore := nodeCounter(t, cl.Nodes, "cluster", "cluster_stats_messages_publish_sent")
	done := spubWaiter(t, b, k)

	// The waiter's channel is subscribed on the key's master, and hashes
	// to the key's slot.
	m, err := cl.MasterOf(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	slot, err := cl.Slot(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	mc := m.Client(t)
	chans, err := mc.PubSubShardChannels(ctx, "*").Result()
	if err != nil || len(chans) != 1 {
		t.Fatalf("shard channels on the key's master: %q, %v; want the waiter's one", chans, err)
	}
	if s, err := mc.ClusterKeySlot(ctx, chans[0]).Result(); err != nil || int(s) != slot {
		t.Fatalf("the waiter's channel %q is in slot %d (%v), the key in %d", chans[0], s, err, slot)
	}
	for _, n := range cl.Nodes {
		if n == m {
			continue
		}
		if cs := n.Client(t).PubSubShardChannels(ctx, "*").Val(); len(cs) != 0 {
			t.Fatalf("node %s has shard channels %q, want none", n.Addr(), cs)
		}
	}

	spubBefore := nodeCounter(t, []*redistest.Server{m}, "commandstats", "cmdstat_spublish")
	start := time.Now()
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	spubAwait(t, done, "hand-off")
	t.Logf("hand-off woke the waiter in %v", time.Since(start).Round(time.Millisecond))
	if b.Stats().Handoffs == 0 {
		t.Fatal("the waiter acquired without a hand-off message")
	}
	// The waiter's own release (nobody queued) sends a release message
	// too, on the key's wake-up channel, by SPUBLISH as well.
	if n := nodeCounter(t, []*redistest.Server{m}, "commandstats", "cmdstat_spublish") - spubBefore; n < 2 {
		t.Fatalf("%d SPUBLISH on the key's master, want the hand-off's and the release's", n)
	}
	if n := nodeCounter(t, cl.Nodes, "cluster", "cluster_stats_messages_publish_sent") - busBefore; n != 0 {
		t.Fatalf("%d PUBLISH messages crossed the cluster bus, want 0", n)
	}
}

// newClusterDlock returns a dlock Client over a new client of cl, both
// closed at the end of the test.
func newClusterDlock(t *testing.T, cl *redistest.Cluster, opts dlock.Options) *dlock.Client {
	t.Helper()
	rdb := cl.NewClient()
	c, err := dlock.New(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = rdb.Close()
	})
	return c
}

// A failover of the key's master while a waiter waits: the waiter's
// shard subscription moves to the new master (the old one ends it, or its
// probe finds it deaf), and the hand-off after the failover still wakes
// it, long before its retry clock.
func TestShardedHandoffAfterFailover(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, redistest.ClusterConfig{Replicas: 1})
	ctx := t.Context()
	a := newClusterDlock(t, cl, spubOpts)
	b := newClusterDlock(t, cl, spubOpts)
	const k = "spub-failover"
	held, err := a.Lock(ctx, k, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	done := spubWaiter(t, b, k)
	old, err := cl.MasterOf(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	replica := replicaOf(t, cl, old)
	if _, err := cl.ManualFailover(ctx, t, replica, k, old); err != nil {
		t.Fatal(err)
	}
	// Give the waiter's subscription time to move (the old master pushes
	// sunsubscribe; else the probe, every 3 s, finds it), then release.
	time.Sleep(6 * time.Second)
	start := time.Now()
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	spubAwait(t, done, "hand-off after a failover")
	t.Logf("hand-off woke the waiter in %v", time.Since(start).Round(time.Millisecond))
}

// replicaOf returns a replica of the master m.
func replicaOf(t *testing.T, cl *redistest.Cluster, m *redistest.Server) *redistest.Server {
	t.Helper()
	id := m.Client(t).ClusterMyID(t.Context()).Val()
	for _, n := range cl.Nodes {
		info := n.Client(t).Info(t.Context(), "replication").Val()
		if !strings.Contains(info, "role:slave") {
			continue
		}
		for _, line := range strings.Split(n.Client(t).ClusterNodes(t.Context()).Val(), "\n") {
			f := strings.Fields(line)
			if len(f) > 3 && strings.Contains(f[2], "myself") && f[3] == id {
				return n
			}
		}
	}
	t.Fatalf("no replica of %s", m.Addr())
	return nil
}

// A slot migration while a waiter waits: the old master ends the
// subscription of the moved slot's channel (or the probe finds it deaf),
// the waiter's Client subscribes it on the new master, and the hand-off
// after the move still wakes the waiter.
func TestShardedHandoffAfterSlotMigration(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, redistest.ClusterConfig{})
	ctx := t.Context()
	a := newClusterDlock(t, cl, spubOpts)
	b := newClusterDlock(t, cl, spubOpts)
	const k = "spub-migrate"
	held, err := a.Lock(ctx, k, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	done := spubWaiter(t, b, k)
	src, err := cl.MasterOf(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	var dst *redistest.Server
	for _, m := range cl.Masters(ctx) {
		if m != src {
			dst = m
			break
		}
	}
	slot, err := cl.Slot(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if mv, err := cl.MoveSlot(ctx, slot, dst, redistest.MoveOptions{}); err != nil {
		t.Fatalf("%v: %v", mv, err)
	}
	if m, err := cl.MasterOf(ctx, k); err != nil || m != dst {
		t.Fatalf("slot %d served by %v (%v) after the move, want %s", slot, m, err, dst.Addr())
	}
	time.Sleep(6 * time.Second)
	start := time.Now()
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	spubAwait(t, done, "hand-off after a slot migration")
	t.Logf("hand-off woke the waiter in %v", time.Since(start).Round(time.Millisecond))
}

// One server (and so Sentinel, whose master is one): hand-offs stay on
// plain PUBLISH.
func TestHandoffPlainOnOneServer(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Config{})
	ctx := t.Context()
	a, _ := newClientOn(t, s.NewClient(), spubOpts)
	b, _ := newClientOn(t, s.NewClient(), spubOpts)
	k := key(t)
	held, err := a.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	done := spubWaiter(t, b, k)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	spubAwait(t, done, "hand-off")
	rc := s.Client(t)
	stats := rc.Info(ctx, "commandstats").Val()
	if infoInt(stats, "cmdstat_publish") < 2 || infoInt(stats, "cmdstat_spublish") != 0 {
		t.Fatalf("PUBLISH %d, SPUBLISH %d: want the hand-off and release by PUBLISH, none by SPUBLISH",
			infoInt(stats, "cmdstat_publish"), infoInt(stats, "cmdstat_spublish"))
	}
	if n := len(rc.PubSubShardChannels(ctx, "*").Val()); n != 0 {
		t.Fatalf("%d shard channels on one server", n)
	}
}

// A multi-key lock across slots queues in each slot in turn: its waiter
// listens on its Client's channel of every one of them, so the hand-off
// of a later slot wakes it too.
func TestShardedHandoffMultiSlot(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, redistest.ClusterConfig{})
	ctx := t.Context()
	a := newClusterDlock(t, cl, spubOpts)
	b := newClusterDlock(t, cl, spubOpts)
	k1, k2 := "spub-multi-1", "spub-multi-2"
	if admin.Slot(k1) > admin.Slot(k2) {
		k1, k2 = k2, k1
	}
	if admin.Slot(k1) == admin.Slot(k2) {
		t.Fatal("the keys share a slot")
	}
	held, err := a.Lock(ctx, k2, dlock.WithTTL(30*time.Second)) // the later slot
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := b.LockMulti(ctx, []string{k1, k2}, dlock.WithTTL(30*time.Second))
		if err == nil {
			err = l.Unlock(context.Background())
		}
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for b.Stats().Waiting == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the multi-key waiter never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // queued in k2's slot after taking k1's
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	spubAwaitWithin(t, done, "hand-off of the second slot", 4*time.Second)
}
