package dlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/stripe"
	"github.com/redis/go-redis/v9"
)

// primitivePairs are the uncontended acquire+release pairs of every kind
// of lock: each acquires on key k (distinct per iteration) and releases.
func primitivePairs() []struct {
	name  string
	split bool
	pair  func(ctx context.Context, c *dlock.Client, k string) error
} {
	lockThen := func(kind primitive) func(context.Context, *dlock.Client, string) error {
		return func(ctx context.Context, c *dlock.Client, k string) error {
			lk, err := kind.TryLock(ctx, c, k, dlock.WithoutRenewal())
			if err != nil {
				return err
			}
			return lk.Unlock(ctx)
		}
	}
	multi := func(n int, tagged bool) func(context.Context, *dlock.Client, string) error {
		return func(ctx context.Context, c *dlock.Client, k string) error {
			keys := make([]string, n)
			for i := range keys {
				if tagged {
					keys[i] = fmt.Sprintf("{%s}:%d", k, i)
				} else {
					keys[i] = fmt.Sprintf("%s:%d", k, i)
				}
			}
			lk, err := c.TryLockMulti(ctx, keys, dlock.WithoutRenewal())
			if err != nil {
				return err
			}
			return lk.Unlock(ctx)
		}
	}
	stripes := stripe.New("bench:stripes", 1024)
	return []struct {
		name  string
		split bool
		pair  func(ctx context.Context, c *dlock.Client, k string) error
	}{
		{"exclusive", false, lockThen(nil)},
		{"reentrant", false, lockThen(reentrant("bench-owner"))},
		{"reentrant-nested", false, func(ctx context.Context, c *dlock.Client, k string) error {
			// The pair measured is the inner one; the outer is set up once
			// per key and kept (keys cycle), so only count the inner.
			lk, err := c.Reentrant(k).TryLock(ctx, "bench-owner", dlock.WithoutRenewal())
			if err != nil {
				return err
			}
			return lk.Unlock(ctx)
		}},
		{"shared", false, lockThen(readers())},
		{"semaphore", false, lockThen(permits(3, 1))},
		{"semaphore-3-permits", false, lockThen(permits(8, 3))},
		{"striped", false, func(ctx context.Context, c *dlock.Client, k string) error {
			return lockThen(nil)(ctx, c, stripes.Key(k))
		}},
		{"multi-2-one-slot", false, multi(2, true)},
		{"multi-4-one-slot", false, multi(4, true)},
		{"multi-2-cross-slot", true, multi(2, false)},
	}
}

// BenchmarkPrimitives measures uncontended acquire+release pairs of every
// kind of lock, and the Redis round trips per pair (the goal: 2, one each
// way; a multi-key lock over n slots takes n each way).
func BenchmarkPrimitives(b *testing.B) {
	for _, p := range primitivePairs() {
		b.Run(p.name, func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
			rt := &roundTrips{}
			rdb.AddHook(rt)
			c, _ := newClientOn(b, rdb, dlock.Options{})
			if p.split {
				dlock.SplitSlots(c)
			}
			ctx := b.Context()
			prefix := fmt.Sprintf("bench:%s:%d", p.name, time.Now().UnixNano())
			if p.name == "reentrant-nested" {
				for i := range 1024 {
					if _, err := c.Reentrant(fmt.Sprintf("%s:%d", prefix, i)).TryLock(ctx, "bench-owner", dlock.WithTTL(time.Hour), dlock.WithoutRenewal()); err != nil {
						b.Fatal(err)
					}
				}
			}
			before := rt.n.Load()
			b.ResetTimer()
			start := time.Now()
			n := 0
			for i := 0; b.Loop(); i++ {
				if err := p.pair(ctx, c, fmt.Sprintf("%s:%d", prefix, i%1024)); err != nil {
					b.Fatal(err)
				}
				n++
			}
			el := time.Since(start)
			b.ReportMetric(float64(n)/el.Seconds(), "pairs/s")
			b.ReportMetric(float64(rt.n.Load()-before)/float64(n), "roundtrips/pair")
		})
	}
}

// Every primitive's uncontended acquire+release is one round trip each
// way (a multi-key lock: one per slot each way).
func TestPrimitivesRoundTrips(t *testing.T) {
	for _, p := range primitivePairs() {
		t.Run(p.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
			rt := &roundTrips{}
			rdb.AddHook(rt)
			c, _ := newClientOn(t, rdb, dlock.Options{})
			if p.split {
				dlock.SplitSlots(c)
			}
			ctx := t.Context()
			k := key(t)
			if p.name == "reentrant-nested" {
				if _, err := c.Reentrant(k).TryLock(ctx, "bench-owner"); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.pair(ctx, c, k); err != nil { // loads the scripts
				t.Fatal(err)
			}
			before := rt.n.Load()
			if err := p.pair(ctx, c, k); err != nil {
				t.Fatal(err)
			}
			want := int64(2)
			if p.split {
				want = 3 // two slots to acquire, in order; one pipeline to release
			}
			if got := rt.n.Load() - before; got != want {
				t.Fatalf("%d round trips per pair, want %d", got, want)
			}
		})
	}
}
