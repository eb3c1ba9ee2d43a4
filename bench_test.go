package dlock_test

import (
	"context"
	_ "embed"
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

//go:embed testdata/pexpire_only.lua
var pexpireOnlySrc string

// BenchmarkRenewalFloor measures what redis-server spends per renewed lock
// on the watchdog's bulk renewal (extend_many.lua: each key read and its
// token compared, then PEXPIRE) against the floor of any per-lock renewal
// (testdata/pexpire_only.lua: PEXPIRE each key, no ownership check, no
// token sent), both as the watchdog sends them: 64 locks per call,
// dlock.RenewBatch per pipeline, 20,480 distinct keys. It reports redis
// CPU per lock (INFO used_cpu_sys + used_cpu_user; the server is the
// test's own) and the renewals per second that one fully busy redis-server
// thread could serve at that cost. Run it alone: other work on the machine
// shows in INFO too.
//
//	go test -run '^$' -bench RenewalFloor -benchtime 50x .
func BenchmarkRenewalFloor(b *testing.B) {
	ctx := b.Context()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	c, _ := newClientOn(b, rdb, dlock.Options{})
	const n = 20 * 1024
	keys, tokens := make([]string, n), make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench:floor:{%d}", i)
		tokens[i] = fmt.Sprintf("t%021d", i)
	}
	set := func() {
		p := rdb.Pipeline()
		for i := range keys {
			p.Set(ctx, keys[i], tokens[i], time.Minute)
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { rdb.Del(context.Background(), keys...) })
	floor := redis.NewScript(pexpireOnlySrc)
	runs := map[string]func(){
		"extend_many": func() {
			if left := dlock.RenewKeys(c, keys, tokens, time.Minute); left != 0 {
				b.Fatalf("%d keys not extended", left)
			}
		},
		"pexpire_only": func() {
			for i := 0; i < n; i += dlock.RenewBatch {
				p := rdb.Pipeline()
				for j := i; j < i+dlock.RenewBatch; j += 64 {
					floor.EvalSha(ctx, p, keys[j:j+64], 60000)
				}
				if _, err := p.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
		},
	}
	if err := floor.Load(ctx, rdb).Err(); err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"extend_many", "pexpire_only"} {
		b.Run(name, func(b *testing.B) {
			set()
			runs[name]() // warm: scripts loaded, connections dialled
			cpu0 := redisCPU(b, rdb)
			b.ResetTimer()
			for b.Loop() {
				runs[name]()
			}
			b.StopTimer()
			us := float64((redisCPU(b, rdb) - cpu0).Microseconds()) / float64(b.N*n)
			b.ReportMetric(us, "redis-µs/lock")
			b.ReportMetric(1e6/us, "locks/s-per-redis-core")
		})
	}
}
