package dlock_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// BenchmarkUncontended measures acquire+release pairs on distinct keys,
// from 1 and from 64 goroutines, and reports Redis round trips per pair.
func BenchmarkUncontended(b *testing.B) {
	for _, g := range []int{1, 64} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 2 * g})
			rt := &roundTrips{}
			rdb.AddHook(rt)
			c, _ := newClientOn(b, rdb, dlock.Options{})
			var seq atomic.Int64
			b.ResetTimer()
			start := time.Now()
			if g == 1 {
				for i := 0; b.Loop(); i++ {
					pair(b, c, fmt.Sprintf("bench:u1:%d", i%1024))
				}
			} else {
				b.SetParallelism(g / runtimeProcs())
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						pair(b, c, fmt.Sprintf("bench:u64:%d", seq.Add(1)%4096))
					}
				})
			}
			el := time.Since(start)
			b.ReportMetric(float64(b.N)/el.Seconds(), "pairs/s")
			b.ReportMetric(float64(rt.n.Load())/float64(b.N), "roundtrips/pair")
		})
	}
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

// BenchmarkPing is the round-trip floor, to read the other figures against
// (measure it in the same run).
func BenchmarkPing(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	for b.Loop() {
		if err := rdb.Ping(b.Context()).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLockDefaults measures the pair the product goals are about:
// Lock (library defaults, so the lock is renewed by the watchdog) and
// Unlock on distinct keys from one goroutine. With -benchmem, allocs/op
// are per pair.
func BenchmarkLockDefaults(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	c, _ := newClientOn(b, rdb, dlock.Options{})
	ctx := b.Context()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench:ld:%d", i)
	}
	for i := 0; b.Loop(); i++ {
		lk, err := c.Lock(ctx, keys[i%len(keys)])
		if err != nil {
			b.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
