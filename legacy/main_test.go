package legacy_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/legacy"
	"github.com/redis/go-redis/v9"
)

// srv is the redis-server shared by the package's tests.
var srv *redistest.Server

// redisAddr is srv's address, for the examples.
var redisAddr string

func TestMain(m *testing.M) {
	os.Exit(redistest.RunShared(m, "legacy", func(s *redistest.Server) { srv, redisAddr = s, s.Addr() }))
}

// newRDB returns a go-redis client to srv, closed at the end of the test.
func newRDB(t testing.TB) *redis.Client {
	t.Helper()
	rdb := srv.NewClient()
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// newDlock returns a dlock Client over its own go-redis client, both closed
// at the end of the test.
func newDlock(t testing.TB, opts dlock.Options) (*dlock.Client, *redis.Client) {
	t.Helper()
	rdb := srv.NewClient()
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

// adminOn returns the admin Client of the locks under the default prefix
// over rdb.
func adminOn(t testing.TB, rdb redis.UniversalClient) *admin.Client {
	t.Helper()
	adm, err := admin.New(rdb, admin.Options{})
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

// skewed returns a clock running d ahead of the real one (behind if d < 0).
func skewed(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

// with returns the lock options selecting p with ttl.
func with(p *legacy.Protocol, ttl time.Duration, more ...dlock.LockOption) []dlock.LockOption {
	return append([]dlock.LockOption{dlock.WithProtocol(p), dlock.WithTTL(ttl)}, more...)
}

// stamp is the current Unix time in unit u.
func stamp(u legacy.Unit) int64 {
	if u == legacy.Milliseconds {
		return time.Now().UnixMilli()
	}
	return time.Now().Unix()
}

// recorder is a go-redis hook that records the names of the commands a
// client sends (EVALSHA/EVAL for scripts), and can run a function after a
// command's reply arrived: to make another client act at an exact point of
// the protocol.
type recorder struct {
	mu    sync.Mutex
	names []string
	after func(ctx context.Context, cmd redis.Cmder) // may be nil
}

// handshake names the commands go-redis sends on a new connection, and
// the CONFIG GET of the eviction check dlock makes on a client's first lock.
var handshake = map[string]bool{"hello": true, "client": true, "auth": true, "select": true, "ping": true, "config": true}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		name := strings.ToLower(cmd.Name())
		if handshake[name] {
			return err
		}
		r.mu.Lock()
		r.names = append(r.names, name)
		after := r.after
		r.mu.Unlock()
		if after != nil {
			after(ctx, cmd)
			if err == nil {
				err = cmd.Err() // after may inject an error with SetErr
			}
		}
		return err
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// take returns the commands recorded since the last call and forgets them.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.names
	r.names = nil
	return out
}

func (r *recorder) setAfter(f func(ctx context.Context, cmd redis.Cmder)) {
	r.mu.Lock()
	r.after = f
	r.mu.Unlock()
}

// withoutScripts drops script calls from names (EVALSHA, and EVAL after NOSCRIPT).
func withoutScripts(names []string) []string {
	var out []string
	for _, n := range names {
		if n != "evalsha" && n != "eval" {
			out = append(out, n)
		}
	}
	return out
}

// counter is the shared resource of the mutual-exclusion tests: a Redis
// integer that every critical section increments by an unprotected
// read-modify-write (GET, then SET), and an in-process count of the
// sections running at once.
type counter struct {
	rdb      *redis.Client
	key      string
	inside   atomic.Int64
	overlaps atomic.Int64
	sections atomic.Int64
}

// section runs one critical section.
func (c *counter) section(ctx context.Context) error {
	if c.inside.Add(1) != 1 {
		c.overlaps.Add(1)
	}
	defer c.inside.Add(-1)
	n, err := c.rdb.Get(ctx, c.key).Int64()
	if err != nil && err != redis.Nil {
		return err
	}
	time.Sleep(200 * time.Microsecond) // widen the race window
	if err := c.rdb.Set(ctx, c.key, n+1, 0).Err(); err != nil {
		return err
	}
	c.sections.Add(1)
	return nil
}

// check fails the test unless every section ran alone and was counted.
func (c *counter) check(t *testing.T, want int64) {
	t.Helper()
	got, err := c.rdb.Get(context.Background(), c.key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if o := c.overlaps.Load(); o != 0 {
		t.Errorf("%d overlapping critical sections", o)
	}
	if s := c.sections.Load(); s != want {
		t.Errorf("%d critical sections ran, want %d", s, want)
	}
	if got != want {
		t.Errorf("counter = %d, want %d (lost updates)", got, want)
	}
}
