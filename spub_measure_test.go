package dlock_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestShardedPubSubBusMessages measures hand-offs on plain and on sharded
// pub/sub side by side, on Clusters of 3, 6 and 9 masters without and
// with one replica each: cluster-bus messages per critical section (each
// release publishes one message), the servers' time inside PUBLISH and
// SPUBLISH (commandstats usec, on the publishing master) and the CPU of
// every node per critical section, the hand-off gap (from the holder's
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
	t.Logf("%-7s %-8s %-7s %6s %9s %8s %7s %9s %9s %9s %9s %6s", "masters", "replicas", "pub/sub", "locks", "hand-offs",
		"bus msgs", "bus/CS", "pub µs/CS", "CPU µs/CS", "gap p50", "gap p99", "conns")
	for _, replicas := range []int{0, 1} {
		for _, masters := range []int{3, 6, 9} {
			cl := redistest.StartCluster(t, redistest.ClusterConfig{Masters: masters, Replicas: replicas})
			for _, plain := range []bool{true, false} {
				r := measureHandoffs(t, cl, plain, dur)
				mode := "sharded"
				if plain {
					mode = "plain"
				}
				cs := float64(max(r.locks, 1))
				t.Logf("%-7d %-8d %-7s %6d %9d %8d %7.2f %9.1f %9.1f %9v %9v %6.2f", masters, replicas, mode, r.locks, r.handoffs,
					r.stats.bus, float64(r.stats.bus)/cs, float64(r.stats.pubUsec)/cs, r.stats.cpu*1e6/cs, r.p50, r.p99, r.conns)
			}
			_ = cl.Close()
		}
	}
}

type handoffRun struct {
	locks, handoffs int64
	stats           busStats // the delta over the run
	p50, p99        time.Duration
	conns           float64
}

// busStats are the counters of a Cluster's nodes a run reads before and
// after: bus messages carrying a publish (plain and sharded), the
// servers' time inside PUBLISH and SPUBLISH (µs, from scripts too) and
// their CPU (s).
type busStats struct {
	bus, pubUsec int64
	cpu          float64
}

func readBusStats(t *testing.T, nodes []*redistest.Server) busStats {
	t.Helper()
	var s busStats
	for _, f := range []string{"cluster_stats_messages_publish_sent", "cluster_stats_messages_publishshard_sent"} {
		s.bus += nodeCounter(t, nodes, "cluster", f)
	}
	for _, n := range nodes {
		rc := n.NewClient()
		text, err := rc.Info(t.Context(), "commandstats", "cpu").Result()
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		s.pubUsec += infoSub(text, "cmdstat_publish", "usec") + infoSub(text, "cmdstat_spublish", "usec")
		for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
			v, _ := strconv.ParseFloat(infoLine(text, f), 64)
			s.cpu += v
		}
	}
	return s
}

func (s busStats) minus(o busStats) busStats {
	return busStats{bus: s.bus - o.bus, pubUsec: s.pubUsec - o.pubUsec, cpu: s.cpu - o.cpu}
}

// infoLine returns the value of field in INFO text ("" if absent).
func infoLine(text, field string) string {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// infoSub reads sub=N of a commandstats line "field:calls=N,usec=N,...".
func infoSub(text, field, sub string) int64 {
	for _, kv := range strings.Split(infoLine(text, field), ",") {
		if v, ok := strings.CutPrefix(kv, sub+"="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
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
	before := readBusStats(t, cl.Nodes)
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
	conns := pubsubConns(t, cl)
	wg.Wait()
	var r handoffRun
	for _, c := range cs {
		r.handoffs += int64(c.Stats().Handoffs)
		_ = c.Close()
	}
	r.stats, r.locks = readBusStats(t, cl.Nodes).minus(before), locks.Load()
	r.conns = float64(conns) / clients
	slices.Sort(gaps)
	if len(gaps) > 0 {
		r.p50, r.p99 = gaps[len(gaps)/2].Round(10*time.Microsecond), gaps[len(gaps)*99/100].Round(10*time.Microsecond)
	}
	return r
}

// pubsubConns counts the pub/sub connections on cl's nodes (CLIENT LIST
// flag P).
func pubsubConns(t *testing.T, cl *redistest.Cluster) int {
	conns := 0
	for _, n := range cl.Nodes {
		list := n.Client(t).ClientList(t.Context()).Val()
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " flags=P ") {
				conns++
			}
		}
	}
	return conns
}
