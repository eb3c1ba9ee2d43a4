package dlockprom_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// srv is the redis-server the package's tests and Examples share: a real
// one, on a free loopback port, in its own temporary directory, without
// persistence, killed by PID at the end.
var srv *redistest.Server

// bg is the context of hooks called directly.
var bg = context.Background()

// redisAddr is srv's address; the Examples connect to it.
var redisAddr string

func TestMain(m *testing.M) {
	os.Exit(redistest.RunShared(m, "dlockprom", func(s *redistest.Server) { srv, redisAddr = s, s.Addr() }))
}

// newClient returns a dlock Client over its own go-redis client to addr,
// both closed at the end of the test.
func newClient(t testing.TB, addr string, opts dlock.Options) (*dlock.Client, *redis.Client) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
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

var keySeq atomic.Int64

// key returns a key no other test uses.
func key(t testing.TB) string {
	return fmt.Sprintf("%s#%d", t.Name(), keySeq.Add(1))
}

// eventually polls cond every 5ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
