package redlock_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// shared are three redis-servers the Examples and the tests that neither
// kill nor pause a node use; the fault tests start their own.
var shared []*redistest.Server

// sharedAddrs are the addresses of shared, for the Examples.
var sharedAddrs []string

// quiet drops go-redis's own log lines (dial failures of killed nodes).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	for range 3 {
		s, err := redistest.StartMain(redistest.Config{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "redlock tests need redis-server:", err)
			os.Exit(1)
		}
		shared = append(shared, s)
		sharedAddrs = append(sharedAddrs, s.Addr())
	}
	code := m.Run()
	for _, s := range shared {
		_ = s.Close()
	}
	if code == 0 {
		code = redistest.CheckLeaks("redlock", 6*time.Second) // a clean-up retries a node for up to 5s
	}
	os.Exit(code)
}

// nodeClient is a client to one node that fails fast, as a Redlock node's
// client should: short timeouts bounded by the request's context, no
// retries (the Protocol retries, with fresh values).
func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		DialTimeout:           250 * time.Millisecond,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialerRetries:         1,
	})
}

// set is one "process": its own node clients, Protocol and dlock Client.
type set struct {
	nodes []*redis.Client
	p     *redlock.Protocol
	c     *dlock.Client
}

// newSet connects to servers; everything is closed at the end of the test.
func newSet(t testing.TB, servers []*redistest.Server, opts redlock.Options, copts dlock.Options) *set {
	t.Helper()
	s := &set{}
	var nodes []redis.UniversalClient
	for _, srv := range servers {
		c := nodeClient(srv.Addr())
		s.nodes = append(s.nodes, c)
		nodes = append(nodes, c)
	}
	c, p, err := redlock.NewClient(nodes, opts, copts)
	if err != nil {
		t.Fatal(err)
	}
	s.c, s.p = c, p
	t.Cleanup(func() {
		_ = c.Close()
		for _, n := range s.nodes {
			_ = n.Close()
		}
	})
	s.warm(t)
	return s
}

// warm dials every reachable node and loads the acquire and release
// scripts there (one TryLock + Unlock of a key of its own), so a test's
// first Lock does not pay a dial and a NOSCRIPT round trip within a
// NodeTimeout of 50-150ms, which a busy CI machine exceeded. Errors are
// ignored: some tests start with nodes down or given twice.
func (s *set) warm(t testing.TB) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	for _, n := range s.nodes {
		_ = n.Ping(ctx).Err()
	}
	k := "warm-up:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for range 3 {
		lk, err := s.c.TryLock(ctx, k, dlock.WithProtocol(s.p))
		if err == nil {
			_ = lk.Unlock(ctx)
			return
		}
	}
}

// start starts n servers for one test.
func start(t testing.TB, n int, cfg redistest.Config) []*redistest.Server {
	t.Helper()
	out := make([]*redistest.Server, n)
	for i := range out {
		out[i] = redistest.Start(t, cfg)
	}
	return out
}

// holders returns, for each server, the value its key holds ("" if none,
// "down" if it does not answer).
func holders(t testing.TB, servers []*redistest.Server, key string) []string {
	t.Helper()
	out := make([]string, len(servers))
	for i, s := range servers {
		c := nodeClient(s.Addr())
		v, err := c.Get(context.Background(), key).Result()
		switch {
		case err == redis.Nil:
		case err != nil:
			v = "down"
		}
		out[i] = v
		_ = c.Close()
	}
	return out
}

// count returns how many entries of vs equal v.
func count(vs []string, v string) int {
	n := 0
	for _, x := range vs {
		if x == v {
			n++
		}
	}
	return n
}
