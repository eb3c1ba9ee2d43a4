package dlockprom_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockprom"
	"github.com/dlock-go/dlock/outcome"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// The setup: a Collector, its hooks added to a Client, Track, register,
// serve.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()

	locks, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	metrics := dlockprom.NewCollector(dlockprom.Opts{})
	locks.AddHooks(metrics.Hooks())
	metrics.Track(locks) // dlock_held, dlock_waiting and the Stats counters read locks.Stats()

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	// In a program: http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	lock, err := locks.TryLock(ctx, "example:prom:report")
	if err != nil {
		panic(err)
	}
	_, err = locks.TryLock(ctx, "example:prom:report") // busy: held by lock
	fmt.Println("second TryLock:", outcome.Of(err))
	printMetrics(srv.URL, "dlock_acquire_duration_seconds_count", "dlock_held ")
	if err := lock.Unlock(ctx); err != nil {
		panic(err)
	}
	printMetrics(srv.URL, "dlock_held ", "dlock_hold_duration_seconds_count")
	// Output:
	// second TryLock: not_acquired
	// dlock_acquire_duration_seconds_count{result="acquired"} 1
	// dlock_acquire_duration_seconds_count{result="busy"} 1
	// dlock_acquire_duration_seconds_count{result="canceled"} 0
	// dlock_acquire_duration_seconds_count{result="error"} 0
	// dlock_acquire_duration_seconds_count{result="timeout"} 0
	// dlock_held 1
	// dlock_held 0
	// dlock_hold_duration_seconds_count 1
}

// A "key" label for a bounded set of lock names: here the part of the key
// before the first ':'.
func Example_keyLabel() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()

	metrics := dlockprom.NewCollector(dlockprom.Opts{
		KeyLabel: func(key string) string {
			kind, _, _ := strings.Cut(key, ":")
			return kind // "invoice", "report": a handful of values
		},
	})
	locks, err := dlock.New(rdb, dlock.Options{Hooks: metrics.Hooks()})
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	metrics.Track(locks)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	for _, key := range []string{"invoice:17", "invoice:18", "report:daily"} {
		lock, err := locks.TryLock(ctx, key)
		if err != nil {
			panic(err)
		}
		_ = lock.Unlock(ctx)
	}
	printMetrics(srv.URL, "dlock_acquire_duration_seconds_count")
	// Output:
	// dlock_acquire_duration_seconds_count{key="invoice",result="acquired"} 2
	// dlock_acquire_duration_seconds_count{key="report",result="acquired"} 1
}

// The Collector's hooks run next to your own, in the order installed.
func Example_ownHooks() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()

	metrics := dlockprom.NewCollector(dlockprom.Opts{})
	mine := dlock.Hooks{
		Lost: func(_ context.Context, i dlock.LostInfo) {
			fmt.Println("lost", i.Key, "reason:", outcome.Of(i.Cause))
		},
	}
	locks, err := dlock.New(rdb, dlock.Options{Hooks: metrics.Hooks()})
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	locks.AddHooks(mine)

	lock, err := locks.TryLock(ctx, "example:prom:chain", dlock.WithoutRenewal())
	if err != nil {
		panic(err)
	}
	rdb.Del(ctx, "example:prom:chain") // somebody deletes the key
	_ = lock.Unlock(ctx)               // finds it gone: the lock was lost
	// Output:
	// lost example:prom:chain reason: expired
}

// printMetrics scrapes url and prints the lines that start with one of
// prefixes, in the exposition's order.
func printMetrics(url string, prefixes ...string) {
	resp, err := http.Get(url)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		for _, p := range prefixes {
			if strings.HasPrefix(sc.Text(), p) {
				fmt.Println(sc.Text())
			}
		}
	}
}
