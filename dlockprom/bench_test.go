package dlockprom_test

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockprom"
	"github.com/redis/go-redis/v9"
)

// BenchmarkOverhead measures uncontended TryLock+Unlock pairs on distinct
// keys against the shared redis-server, with no hooks and with the
// Collector's hooks (and the Collector scraped, as in production, only
// between runs), from 1 and from 16 goroutines. Compare the pairs/s of
// hooks=none and hooks=prom at the same goroutine count; run several
// times, e.g.
//
//	go test -run '^$' -bench Overhead -count 5
//
// and compare medians.
func BenchmarkOverhead(b *testing.B) {
	for _, g := range []int{1, 16} {
		for _, mode := range []string{"none", "prom"} {
			b.Run(fmt.Sprintf("goroutines=%d/hooks=%s", g, mode), func(b *testing.B) {
				var opts dlock.Options
				if mode == "prom" {
					m := dlockprom.NewCollector(dlockprom.Opts{})
					opts.Hooks = m.Hooks()
				}
				rdb := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 2 * g})
				c, err := dlock.New(rdb, opts)
				if err != nil {
					b.Fatal(err)
				}
				defer func() {
					_ = c.Close()
					_ = rdb.Close()
				}()
				prefix := fmt.Sprintf("bench:%d:%s:", g, mode)
				var seq atomic.Int64
				start := time.Now()
				if g == 1 {
					for i := 0; b.Loop(); i++ {
						pair(b, c, fmt.Sprintf("%s%d", prefix, i%1024))
					}
				} else {
					b.SetParallelism(max(1, g/runtime.GOMAXPROCS(0)))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							pair(b, c, fmt.Sprintf("%s%d", prefix, seq.Add(1)%4096))
						}
					})
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
			})
		}
	}
}

// BenchmarkOverheadInterleaved is BenchmarkOverhead with both Clients in
// one run: every iteration does one pair on the Client without hooks and
// one on the Client with the Collector's hooks, alternating which goes
// first, and times each. Both see the same machine at the same moment, so
// noise from other processes cancels out of the ratio, which is reported
// as overhead-% (the extra time per pair with the hooks, in percent), and
// as p50-overhead-% (the same from the median pair latencies, which a few
// stalls of the machine cannot move).
func BenchmarkOverheadInterleaved(b *testing.B) {
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			none := benchClient(b, g, dlock.Options{})
			prom := benchClient(b, g, dlock.Options{Hooks: dlockprom.NewCollector(dlockprom.Opts{}).Hooks()})
			var tNone, tProm, n atomic.Int64
			var mu sync.Mutex
			var latNone, latProm []time.Duration
			run := func(i int64) {
				kn, kp := fmt.Sprintf("bench:i:%d:none:%d", g, i%4096), fmt.Sprintf("bench:i:%d:prom:%d", g, i%4096)
				var dn, dp time.Duration
				if i%2 == 0 {
					t0 := time.Now()
					pair(b, none, kn)
					t1 := time.Now()
					pair(b, prom, kp)
					dn, dp = t1.Sub(t0), time.Since(t1)
				} else {
					t0 := time.Now()
					pair(b, prom, kp)
					t1 := time.Now()
					pair(b, none, kn)
					dp, dn = t1.Sub(t0), time.Since(t1)
				}
				tNone.Add(int64(dn))
				tProm.Add(int64(dp))
				mu.Lock()
				latNone, latProm = append(latNone, dn), append(latProm, dp)
				mu.Unlock()
			}
			if g == 1 {
				for b.Loop() {
					run(n.Add(1))
				}
			} else {
				b.SetParallelism(max(1, g/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						run(n.Add(1))
					}
				})
			}
			// Throughput per Client: pairs over the time spent in them,
			// divided among the goroutines that ran concurrently.
			conc := float64(g)
			b.ReportMetric(float64(n.Load())*conc/time.Duration(tNone.Load()).Seconds(), "none-pairs/s")
			b.ReportMetric(float64(n.Load())*conc/time.Duration(tProm.Load()).Seconds(), "prom-pairs/s")
			b.ReportMetric(100*(float64(tProm.Load())/float64(tNone.Load())-1), "overhead-%")
			b.ReportMetric(100*(float64(median(latProm))/float64(median(latNone))-1), "p50-overhead-%")
		})
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

func benchClient(b *testing.B, g int, opts dlock.Options) *dlock.Client {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 2 * g})
	c, err := dlock.New(rdb, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.Close()
		_ = rdb.Close()
	})
	return c
}

func pair(b *testing.B, c *dlock.Client, k string) {
	lk, err := c.TryLock(b.Context(), k, dlock.WithoutRenewal())
	if err != nil {
		b.Error(err)
		return
	}
	if err := lk.Unlock(b.Context()); err != nil {
		b.Error(err)
	}
}

// BenchmarkHooks is the CPU cost the Collector adds to one uncontended pair:
// the Acquire and Release hooks, called directly (no Redis), from one
// goroutine and from GOMAXPROCS goroutines sharing the series. (The core
// adds two time.Since calls per pair when hooks are installed, not counted
// here.) Divide by the ns/op of BenchmarkOverhead's hooks=none for the
// expected overhead.
func BenchmarkHooks(b *testing.B) {
	for _, name := range []string{"default", "keylabel", "default-parallel"} {
		b.Run(name, func(b *testing.B) {
			var opts dlockprom.Opts
			if name == "keylabel" {
				opts.KeyLabel = func(string) string { return "bench" }
			}
			h := dlockprom.NewCollector(opts).Hooks()
			acq := dlock.AcquireInfo{Key: "bench:1", Fence: 1, Wait: 200 * time.Microsecond, Attempts: 1}
			rel := dlock.ReleaseInfo{Key: "bench:1", Held: 100 * time.Microsecond}
			b.ReportAllocs()
			if name != "default-parallel" {
				for b.Loop() {
					h.Acquire(bg, acq)
					h.Release(bg, rel)
				}
				return
			}
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					h.Acquire(bg, acq)
					h.Release(bg, rel)
				}
			})
		})
	}
}
