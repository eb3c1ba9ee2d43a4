package main

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// evictingRedis starts a redis-server that may evict keys, as managed
// Redis services are often configured.
func evictingRedis(t testing.TB) *redistest.Server {
	return redistest.Start(t, redistest.Config{ExtraArgs: []string{"--maxmemory", "100mb", "--maxmemory-policy", "volatile-ttl"}})
}

// oneLine fails unless stderr is one line.
func wantOneLine(t testing.TB, r result) {
	t.Helper()
	if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n != 0 {
		t.Errorf("stderr has %d lines, want one:\n%v", n+1, r)
	}
}

// TestRunEvictingRedis: dlock run and elect refuse a Redis that may evict
// lock keys, in one line that names the policy and the opt-out flag, and
// run the command with --allow-eviction.
func TestRunEvictingRedis(t *testing.T) {
	t.Parallel()
	s := evictingRedis(t)
	for _, verb := range []string{"run", "elect"} {
		r := dlockRun(t, nil, "--redis", s.URL(), verb, "evict-key", "--", "true")
		expectCode(t, r, exitFailed)
		expectStderr(t, r, "volatile-ttl", "--allow-eviction", "maxmemory-policy noeviction")
		wantOneLine(t, r)
	}
	if n := s.Client(t).DBSize(t.Context()).Val(); n != 0 {
		t.Errorf("refused commands wrote %d keys", n)
	}
	for _, verb := range []string{"run", "elect"} {
		r := dlockRun(t, nil, "--redis", s.URL(), verb, "--allow-eviction", "evict-key", "--", "true")
		expectCode(t, r, exitOK)
	}
}

// TestDemoEvictingRedis: the demo runs on a Redis that may evict keys, and
// says in one line what that would mean for real locks.
func TestDemoEvictingRedis(t *testing.T) {
	t.Parallel()
	s := evictingRedis(t)
	r := dlockRun(t, nil, append([]string{"--redis", s.URL(), "demo", "--modes", "lock"}, smallSale...)...)
	expectCode(t, r, exitOK)
	expectStderr(t, r, "note: Redis may evict lock keys", "volatile-ttl", "the demo runs anyway")
	wantOneLine(t, r)
	rows := table(t, r.stdout, "lock")
	if sold, over := atoi(t, rows["lock"]["sold"]), atoi(t, rows["lock"]["oversold"]); sold != 40 || over != 0 {
		t.Errorf("lock: sold %d oversold %d, want exactly 40 and 0:\n%v", sold, over, r)
	}
}

// TestBenchEvictingRedis: bench refuses a Redis that may evict keys unless
// --allow-eviction.
func TestBenchEvictingRedis(t *testing.T) {
	t.Parallel()
	s := evictingRedis(t)
	r := dlockRun(t, nil, "--redis", s.URL(), "bench", "--clients", "2", "--duration", "200ms")
	expectCode(t, r, exitFailed)
	expectStderr(t, r, "volatile-ttl", "--allow-eviction")
	wantOneLine(t, r)
	r = dlockRun(t, nil, "--redis", s.URL(), "bench", "--allow-eviction", "--clients", "2", "--duration", "200ms")
	expectCode(t, r, exitOK)
}

// TestRedlockEvictingNode: dlock run --redlock refuses a set of nodes of
// which one may evict keys, in one line, unless --allow-eviction.
func TestRedlockEvictingNode(t *testing.T) {
	t.Parallel()
	urls := []string{ownServer(t).URL(), ownServer(t).URL(), evictingRedis(t).URL()}
	r := dlockRun(t, nil, "run", "--redlock", strings.Join(urls, ","), "evict-rl", "--", "true")
	expectCode(t, r, exitFailed)
	expectStderr(t, r, "volatile-ttl", "--allow-eviction")
	wantOneLine(t, r)
	r = dlockRun(t, nil, "run", "--allow-eviction", "--redlock", strings.Join(urls, ","), "evict-rl", "--", "true")
	expectCode(t, r, exitOK)
}
