package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// syncBuf is a log sink safe for the Client's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func warnLogger(w *syncBuf) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// evictingServer starts a redis-server that evicts keys under memory
// pressure, as managed Redis services are often configured.
func evictingServer(t *testing.T, policy string, extra ...string) *redistest.Server {
	t.Helper()
	args := append([]string{"--maxmemory", "100mb", "--maxmemory-policy", policy}, extra...)
	return redistest.Start(t, redistest.Config{ExtraArgs: args})
}

// wantRefused checks that err is a one-line ErrEvictionPolicy naming policy.
func wantRefused(t *testing.T, what string, err error, policy string) {
	t.Helper()
	if !errors.Is(err, dlock.ErrEvictionPolicy) {
		t.Fatalf("%s: err = %v, want ErrEvictionPolicy", what, err)
	}
	if msg := err.Error(); !strings.Contains(msg, policy) || strings.Contains(msg, "\n") {
		t.Fatalf("%s: message %q does not name %s on one line", what, msg, policy)
	}
}

// TestEvictionPolicyRefused: on a Redis whose maxmemory-policy may evict a
// lock key (the volatile-* policies too: every lock key has a TTL), every
// acquire is refused with ErrEvictionPolicy before anything is written, and
// CheckServers says so; maxmemory 0 does not make an evicting policy safe.
func TestEvictionPolicyRefused(t *testing.T) {
	t.Parallel()
	s := evictingServer(t, "volatile-ttl")
	admin := s.Client(t)
	ctx := t.Context()
	for _, tc := range []struct{ policy, maxmemory string }{
		{"volatile-ttl", "100mb"}, {"volatile-lru", "100mb"}, {"allkeys-lru", "100mb"},
		{"allkeys-random", "100mb"}, {"volatile-lfu", "0"},
	} {
		if err := admin.ConfigSet(ctx, "maxmemory-policy", tc.policy).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.ConfigSet(ctx, "maxmemory", tc.maxmemory).Err(); err != nil {
			t.Fatal(err)
		}
		c, _ := newClientOn(t, s.NewClient(), dlock.Options{})
		_, err := c.TryLock(ctx, "evict:try")
		wantRefused(t, tc.policy+" TryLock", err, tc.policy)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = c.Lock(wctx, "evict:wait")
		cancel()
		wantRefused(t, tc.policy+" Lock", err, tc.policy)
		_, err = c.Semaphore("evict:sem", 3).Acquire(ctx, 1)
		wantRefused(t, tc.policy+" Semaphore.Acquire", err, tc.policy)
		wantRefused(t, tc.policy+" CheckServers", c.CheckServers(ctx), tc.policy)
		if n := admin.DBSize(ctx).Val(); n != 0 {
			t.Fatalf("%s: %d keys written by refused acquires", tc.policy, n)
		}
	}
}

// TestEvictionPolicyAllowed: AllowEviction lets acquires proceed on an
// evicting Redis, with a WARN that names the policy; noeviction passes.
func TestEvictionPolicyAllowed(t *testing.T) {
	t.Parallel()
	s := evictingServer(t, "volatile-lru")
	ctx := t.Context()
	var logs syncBuf
	c, _ := newClientOn(t, s.NewClient(), dlock.Options{AllowEviction: true, Logger: warnLogger(&logs)})
	if err := c.CheckServers(ctx); err != nil {
		t.Fatalf("CheckServers with AllowEviction: %v", err)
	}
	lk, err := c.TryLock(ctx, "evict:allowed")
	if err != nil {
		t.Fatalf("TryLock with AllowEviction: %v", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); !strings.Contains(l, "volatile-lru") || !strings.Contains(l, "AllowEviction") {
		t.Fatalf("no WARN naming the policy and AllowEviction; logs:\n%s", l)
	}
	safe, _ := newClient(t, dlock.Options{})
	if err := safe.CheckServers(ctx); err != nil {
		t.Fatalf("CheckServers on a noeviction server: %v", err)
	}
}

// TestEvictionPolicyChangedLater: a CONFIG SET after the first check is
// found by a later acquire (the verdict is re-read), and a policy set back
// to noeviction lets acquires through again; a lock held meanwhile stays
// held.
func TestEvictionPolicyChangedLater(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Config{})
	admin := s.Client(t)
	ctx := t.Context()
	c, _ := newClientOn(t, s.NewClient(), dlock.Options{})
	dlock.SetEvictRecheck(c, 50*time.Millisecond)
	held, err := c.TryLock(ctx, "evict:held")
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lfu").Err(); err != nil {
		t.Fatal(err)
	}
	err = pollErr(t, 10*time.Second, func() error { return tryUnlock(ctx, c, "evict:other") }, func(err error) bool {
		return errors.Is(err, dlock.ErrEvictionPolicy)
	})
	wantRefused(t, "TryLock after CONFIG SET", err, "allkeys-lfu")
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	pollErr(t, 10*time.Second, func() error { return tryUnlock(ctx, c, "evict:other") }, func(err error) bool { return err == nil })
	if err := held.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the lock held across the policy change: %v", err)
	}
}

// tryUnlock takes key and gives it back.
func tryUnlock(ctx context.Context, c *dlock.Client, key string) error {
	lk, err := c.TryLock(ctx, key)
	if err != nil {
		return err
	}
	return lk.Unlock(ctx)
}

// pollErr calls f until done(its error) or the deadline, and returns the
// last error.
func pollErr(t *testing.T, within time.Duration, f func() error, done func(error) bool) error {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if done(err) {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %v after %v", err, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEvictionPolicyNoConfig: with CONFIG renamed away (as managed Redis
// services do), the policy is read from INFO memory; with both denied by
// ACL, the Client says so at WARN and does not refuse.
func TestEvictionPolicyNoConfig(t *testing.T) {
	t.Parallel()
	s := evictingServer(t, "volatile-ttl", "--rename-command", "CONFIG", "")
	ctx := t.Context()
	c, _ := newClientOn(t, s.NewClient(), dlock.Options{})
	_, err := c.TryLock(ctx, "evict:renamed")
	wantRefused(t, "TryLock with CONFIG renamed", err, "volatile-ttl")

	admin := s.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-config", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	app := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "app", Password: "pw"})
	c2, _ := newClientOn(t, app, dlock.Options{Logger: warnLogger(&logs)})
	if err := tryUnlock(ctx, c2, "evict:blind"); err != nil {
		t.Fatalf("TryLock with the policy unreadable: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, "could not read maxmemory-policy") {
		t.Fatalf("no WARN that the policy is unreadable; logs:\n%s", l)
	}
}

// TestEvictionPolicyCluster: one Cluster master with an evicting policy is
// enough to refuse the Client's acquires, on every master, and
// CheckServers names that master.
func TestEvictionPolicyCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, redistest.ClusterConfig{})
	ctx := t.Context()
	rdb := cl.Client(t)
	c, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CheckServers(ctx); err != nil {
		t.Fatalf("CheckServers on noeviction masters: %v", err)
	}
	m := cl.Masters(ctx)[1]
	if err := m.Client(t).ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err(); err != nil {
		t.Fatal(err)
	}
	err = c.CheckServers(ctx)
	wantRefused(t, "CheckServers", err, "volatile-ttl")
	if !strings.Contains(err.Error(), m.Addr()) {
		t.Fatalf("CheckServers: %q does not name the evicting master %s", err, m.Addr())
	}
	for _, k := range topoKeys {
		_, err := c.TryLock(ctx, k)
		wantRefused(t, "TryLock "+k, err, "volatile-ttl")
	}
}

// TestEvictionPolicyFailover: the master a Sentinel failover brings has
// its own policy; the Client reads it again when it dials the new master
// (not only when its verdict gets old: that is an hour here), and refuses
// once the new master may evict, while the old one did not.
func TestEvictionPolicyFailover(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, redistest.SentinelConfig{})
	ctx := t.Context()
	old, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Nodes {
		if r != old {
			if err := r.Client(t).ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	c, _ := newClientOn(t, s.NewClient(), dlock.Options{})
	dlock.SetEvictRecheck(c, time.Hour)
	if err := tryUnlock(ctx, c, "evict:failover"); err != nil {
		t.Fatalf("TryLock on the noeviction master: %v", err)
	}
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := s.WaitFailover(wctx, old); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = pollErr(t, 30*time.Second, func() error { return tryUnlock(ctx, c, "evict:failover") }, func(err error) bool {
		return errors.Is(err, dlock.ErrEvictionPolicy)
	})
	wantRefused(t, "TryLock after the failover", err, "volatile-ttl")
	t.Logf("refused %v after the failover was seen", time.Since(start).Round(time.Millisecond))
}
