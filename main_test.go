package dlock_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// srv is the redis-server shared by the package's tests (start-up is paid
// once); tests that restart or pause a server start their own.
var srv *redistest.Server

// redisAddr is srv's address; the Examples connect to it.
var redisAddr string

func TestMain(m *testing.M) {
	if os.Getenv("DLOCK_TEST_CHILD") != "" {
		os.Exit(runChild())
	}
	os.Exit(redistest.RunShared(m, "dlock", func(s *redistest.Server) { srv, redisAddr = s, s.Addr() }))
}

// newClient returns a go-redis client to srv and a dlock Client over it,
// both closed at the end of the test.
func newClient(t testing.TB, opts dlock.Options) (*dlock.Client, *redis.Client) {
	t.Helper()
	return newClientOn(t, srv.NewClient(), opts)
}

func newClientOn(t testing.TB, rdb *redis.Client, opts dlock.Options) (*dlock.Client, *redis.Client) {
	t.Helper()
	c, err := dlock.New(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = rdb.Close()
	})
	return c, rdb
}

// adminOf returns the admin Client of c's locks: over c's Redis, with its
// prefix and pickup timeout.
func adminOf(t testing.TB, c *dlock.Client) *admin.Client {
	t.Helper()
	o := c.Options()
	adm, err := admin.New(dlock.RedisOf(c), admin.Options{Prefix: o.Prefix, PickupTimeout: o.PickupTimeout})
	if err != nil {
		t.Fatal(err)
	}
	return adm
}

var keySeq atomic.Int64

// key returns a key no other test uses.
func key(t testing.TB) string {
	return fmt.Sprintf("%s#%d", t.Name(), keySeq.Add(1))
}

// roundTrips counts the commands and pipelines a go-redis client sends.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

func runtimeProcs() int { return max(1, runtime.GOMAXPROCS(0)) }

// runChild is a waiter in its own process, for tests that kill or stop
// one: it connects to DLOCK_TEST_ADDR, waits for DLOCK_TEST_KEY with
// WaiterLease and PickupTimeout from DLOCK_TEST_LEASE / DLOCK_TEST_PICKUP,
// prints "acquired <fence>" when it gets the lock, then holds it until
// killed.
func runChild() int {
	lease, _ := time.ParseDuration(os.Getenv("DLOCK_TEST_LEASE"))
	pickup, _ := time.ParseDuration(os.Getenv("DLOCK_TEST_PICKUP"))
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("DLOCK_TEST_ADDR")})
	c, err := dlock.New(rdb, dlock.Options{WaiterLease: lease, PickupTimeout: pickup})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("waiting")
	lk, err := c.Lock(context.Background(), os.Getenv("DLOCK_TEST_KEY"), dlock.WithTTL(time.Minute))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("acquired", lk.Fence())
	select {}
}
