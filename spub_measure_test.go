package dlock_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestShardedPubSubBusMessages measures hand-offs on plain and on sharded
// pub/sub side by side, on Clusters of 3, 6 and 9 masters (no replicas):
// cluster-bus messages per hand-off, the hand-off gap (from the holder's
// Unlock to the next holder's Lock returning) and pub/sub connections per
// Client. It runs only with DLOCK_SPUB_BENCH=1 (bench/README.md, Cluster).
func TestShardedPubSubBusMessages(t *testing.T) {
	if os.Getenv("DLOCK_SPUB_BENCH") == "" {
		t.Skip("set DLOCK_SPUB_BENCH=1 to measure")
	}
	dur := 5 * time.Second
	if d, err := time.ParseDuration(os.Getenv("DLOCK_SPUB_DURATION")); err == nil {
		dur = d
	}
	t.Logf("%-7s %-7s %6s %9s %8s %13s %9s %9s %12s", "masters", "pub/sub", "locks", "hand-offs", "bus msgs", "msgs/hand-off", "gap p50", "gap p99", "conns/Client")
	for _, masters := range []int{3, 6, 9} {
		cl := redistest.StartCluster(t, redistest.ClusterConfig{Masters: masters})
		for _, plain := range []bool{false, true} {
			r := measureHandoffs(t, cl, plain, dur)
			mode := "sharded"
			if plain {
				mode = "plain"
			}
			t.Logf("%-7d %-7s %6d %9d %8d %13.2f %9v %9v %12.2f", masters, mode, r.locks, r.handoffs, r.bus,
				float64(r.bus)/float64(max(r.handoffs, 1)), r.p50, r.p99, r.conns)
		}
		_ = cl.Close()
	}
}

type handoffRun struct {
	locks, handoffs, bus int64
	p50, p99             time.Duration
	conns                float64
}

// measureHandoffs runs 4 Clients × 4 workers on 8 keys for dur, each
// holding the lock 1 ms.
func measureHandoffs(t *testing.T, cl *redistest.Cluster, plain bool, dur time.Duration) handoffRun {
	dlock.SetPlainPubSub(plain)
	defer dlock.SetPlainPubSub(false)
	const clients, workers, keys = 4, 4, 8
	cs := make([]*dlock.Client, clients)
	for i := range cs {
		cs[i] = newClusterDlock(t, cl, dlock.Options{})
	}
	released := make([]atomic.Int64, keys) // unix ns of the last Unlock's start, per key
	busFields := []string{"cluster_stats_messages_publish_sent", "cluster_stats_messages_publishshard_sent"}
	bus := func() int64 {
		var n int64
		for _, f := range busFields {
			n += nodeCounter(t, cl.Nodes, "cluster", f)
		}
		return n
	}
	before := bus()
	var locks atomic.Int64
	var mu sync.Mutex
	var gaps []time.Duration
	ctx, cancel := context.WithTimeout(t.Context(), dur)
	defer cancel()
	var wg sync.WaitGroup
	for w := range clients * workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs[w%clients]
			for i := w; ctx.Err() == nil; i++ {
				ki := i % keys
				start := time.Now().UnixNano()
				l, err := c.Lock(ctx, fmt.Sprintf("spub-bench-%d", ki))
				if err != nil {
					return
				}
				locks.Add(1)
				if at := released[ki].Load(); at > start {
					mu.Lock()
					gaps = append(gaps, time.Duration(time.Now().UnixNano()-at))
					mu.Unlock()
				}
				time.Sleep(time.Millisecond)
				released[ki].Store(time.Now().UnixNano())
				_ = l.Unlock(context.Background())
			}
		}()
	}
	time.Sleep(dur / 2)
	conns := 0
	for _, n := range cl.Nodes {
		list := n.Client(t).ClientList(t.Context()).Val()
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " flags=P ") {
				conns++
			}
		}
	}
	wg.Wait()
	var r handoffRun
	for _, c := range cs {
		r.handoffs += int64(c.Stats().Handoffs)
		_ = c.Close()
	}
	r.bus, r.locks = bus()-before, locks.Load()
	r.conns = float64(conns) / clients
	slices.Sort(gaps)
	if len(gaps) > 0 {
		r.p50, r.p99 = gaps[len(gaps)/2].Round(10*time.Microsecond), gaps[len(gaps)*99/100].Round(10*time.Microsecond)
	}
	return r
}
