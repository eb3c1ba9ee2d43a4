package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/benchkit"
	"github.com/dlock-go/dlock/internal/redistest"
)

// table parses the rows of a demo table: the first column is the mode, the
// others are returned by header name.
func table(t testing.TB, out string, modes ...string) map[string]map[string]string {
	t.Helper()
	lines := strings.Split(out, "\n")
	var header []string
	rows := map[string]map[string]string{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "mode" {
			// Multi-word headers: split on runs of 2+ spaces instead.
			header = regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(l), -1)
			continue
		}
		if header != nil && len(f) == len(header) && slicesContains(modes, f[0]) {
			row := map[string]string{}
			for i, h := range header {
				row[h] = f[i]
			}
			rows[f[0]] = row
		}
	}
	for _, m := range modes {
		if rows[m] == nil {
			t.Fatalf("no row for mode %s in:\n%s", m, out)
		}
	}
	return rows
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func atoi(t testing.TB, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// leftovers returns the keys a demo or bench left behind on s.
func leftovers(t testing.TB, s *redistest.Server, pattern string) []string {
	keys, err := s.Client(t).Keys(context.Background(), pattern).Result() // test-only, tiny keyspace
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// ownServer starts a server for one test, for the tests that check every
// key of a pattern: their runs do not see the keys of other tests'.
func ownServer(t testing.TB) *redistest.Server {
	return redistest.Start(t, redistest.Config{})
}

var smallSale = []string{"--stock", "40", "--customers", "160", "--workers", "3", "--buyers", "4",
	"--segments", "4", "--work", "2ms"}

func TestDemoFlashSale(t *testing.T) {
	t.Parallel()
	own := ownServer(t)
	r := dlockRun(t, nil, append([]string{"--redis", own.URL(), "demo"}, smallSale...)...)
	expectCode(t, r, 0)
	rows := table(t, r.stdout, "none", "lock", "segmented", "atomic")
	if over := atoi(t, rows["none"]["oversold"]); over <= 0 {
		t.Errorf("none: oversold %d, want > 0 (the race without a lock):\n%v", over, r)
	}
	for _, m := range []string{"lock", "segmented", "atomic"} {
		if sold, over := atoi(t, rows[m]["sold"]), atoi(t, rows[m]["oversold"]); sold != 40 || over != 0 {
			t.Errorf("%s: sold %d oversold %d, want exactly 40 and 0:\n%v", m, sold, over, r)
		}
	}
	if rows["lock"]["lock waits"] == "-" || rows["none"]["lock waits"] != "-" {
		t.Errorf("lock waits column: %v", rows)
	}
	if k := leftovers(t, own, "dlock-demo-*"); len(k) > 0 {
		t.Errorf("the demo left keys behind: %v", k)
	}
}

func TestDemoIDsAndRateLimit(t *testing.T) {
	t.Parallel()
	t.Run("ids", func(t *testing.T) {
		t.Parallel()
		r := dlockRun(t, nil, onSrv("demo", "ids", "--workers", "2", "--buyers", "4", "--ids", "10", "--work", "2ms")...)
		expectCode(t, r, 0)
		rows := table(t, r.stdout, "none", "lock", "atomic")
		if d := atoi(t, rows["none"]["duplicates"]); d <= 0 {
			t.Errorf("none: %d duplicates, want > 0:\n%v", d, r)
		}
		for _, m := range []string{"lock", "atomic"} {
			if n, d := atoi(t, rows[m]["ids"]), atoi(t, rows[m]["duplicates"]); n != 80 || d != 0 {
				t.Errorf("%s: %d ids, %d duplicates; want 80 and 0", m, n, d)
			}
		}
	})
	t.Run("ratelimit", func(t *testing.T) {
		t.Parallel()
		r := dlockRun(t, nil, onSrv("demo", "ratelimit", "--workers", "2", "--buyers", "4", "--requests", "10",
			"--ips", "2", "--limit", "5", "--work", "2ms")...)
		expectCode(t, r, 0)
		rows := table(t, r.stdout, "none", "lock", "atomic")
		if o := atoi(t, rows["none"]["over limit"]); o <= 0 {
			t.Errorf("none: %d over the limit, want > 0:\n%v", o, r)
		}
		for _, m := range []string{"lock", "atomic"} {
			if a, o := atoi(t, rows[m]["allowed"]), atoi(t, rows[m]["over limit"]); a != 10 || o != 0 {
				t.Errorf("%s: %d allowed, %d over; want 10 and 0", m, a, o)
			}
		}
	})
	t.Run("usage", func(t *testing.T) {
		t.Parallel()
		expectCode(t, dlockRun(t, nil, onSrv("demo", "nosuch")...), 2)
		expectCode(t, dlockRun(t, nil, onSrv("demo", "--modes", "lock,bogus")...), 2)
		expectCode(t, dlockRun(t, nil, onSrv("demo", "--workers", "0")...), 2)
	})
}

// TestDemoPrivateServer: with no URL given and nothing at the default
// address, demo and bench start their own redis-server and stop it.
func TestDemoPrivateServer(t *testing.T) {
	t.Parallel()
	pidRE := regexp.MustCompile(`private redis-server \(pid (\d+)\) on (127\.0\.0\.1:\d+)`)
	check := func(t *testing.T, r result) {
		t.Helper()
		expectCode(t, r, 0)
		m := pidRE.FindStringSubmatch(r.stderr)
		if m == nil {
			t.Fatalf("no private server announced:\n%v", r)
		}
		if !strings.Contains(r.stderr, "no Redis answered at "+deadAddr) {
			t.Errorf("the message does not say why:\n%v", r)
		}
		pid := atoi(t, m[1])
		waitFor(t, 5*time.Second, "the private redis-server to be gone", func() bool { return !pidAlive(pid) })
		if reply := probeRedis(m[2], 200*time.Millisecond); reply != "" {
			t.Errorf("something still answers at %s: %q", m[2], reply)
		}
	}
	path := []string{pathEnv()}
	t.Run("demo", func(t *testing.T) {
		t.Parallel()
		r := inProcessEnv(path, append([]string{"demo", "--modes", "none,lock"}, smallSale...)...)
		check(t, r)
		rows := table(t, r.stdout, "none", "lock")
		if atoi(t, rows["lock"]["oversold"]) != 0 {
			t.Errorf("lock oversold:\n%v", r)
		}
	})
	t.Run("bench", func(t *testing.T) {
		t.Parallel()
		check(t, inProcessEnv(path, "bench", "--duration", "300ms", "--clients", "2"))
	})
	t.Run("no redis-server", func(t *testing.T) {
		t.Parallel()
		env := []string{"PATH=" + t.TempDir()}
		for _, cmd := range [][]string{{"demo"}, {"bench"}} {
			r := inProcessEnv(env, cmd...)
			expectCode(t, r, 125)
			expectStderr(t, r, "redis-server is not on PATH", "apt-get install redis-server", "brew install redis")
		}
	})
	t.Run("run and status never start one", func(t *testing.T) {
		t.Parallel()
		for _, cmd := range [][]string{{"run", "k", "true"}, {"status", "k"}, {"list"}, {"release", "k", "--force"}} {
			r := inProcessEnv(path, cmd...)
			expectCode(t, r, 125)
			expectStderr(t, r, "cannot reach Redis at "+deadAddr)
			if strings.Contains(r.stderr, "private") {
				t.Errorf("%v started a private server:\n%v", cmd, r)
			}
		}
	})
}

func TestBench(t *testing.T) {
	t.Parallel()
	own := ownServer(t)
	r := dlockRun(t, nil, "--redis", own.URL(), "bench", "--duration", "700ms", "--clients", "4", "--keys", "2", "--json")
	expectCode(t, r, 0)
	var rep struct {
		Sections    int64   `json:"critical_sections"`
		PerS        float64 `json:"critical_sections_per_s"`
		Overlaps    int64   `json:"overlaps"`
		CmdsPer     float64 `json:"redis_commands_per_section"`
		HandoffP50  float64 `json:"handoff_p50_ms"`
		HandoffN    int     `json:"handoff_samples"`
		FairMin     int64   `json:"fairness_min"`
		PerClient   []int64 `json:"per_client"`
		PingP50     float64 `json:"ping_rtt_p50_ms"`
		AcquireErrs int64   `json:"acquire_errors"`
		Server      string  `json:"server"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("bench --json: %v\n%v", err, r)
	}
	// The server by its own name and release: Valkey reports a
	// redis_version too (the Redis release it is compatible with).
	info, err := own.Client(t).Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := benchkit.ServerVersion(info); want == "" || rep.Server != want {
		t.Errorf("bench --json: server %q, want %q (INFO server)", rep.Server, want)
	}
	if rep.Sections <= 0 || rep.PerS <= 0 || rep.Overlaps != 0 || rep.CmdsPer < 2 || rep.HandoffN <= 0 ||
		rep.HandoffP50 <= 0 || len(rep.PerClient) != 4 || rep.PingP50 <= 0 || rep.AcquireErrs != 0 {
		t.Errorf("bench --json: %+v\n%v", rep, r)
	}
	r = dlockRun(t, nil, "--redis", own.URL(), "bench", "--duration", "300ms", "--clients", "2", "--hold", "1ms")
	expectCode(t, r, 0)
	for _, s := range []string{rep.Server + " at " + own.Addr(), "critical sections", "hand-off p50 / p99", "commands / section", "fairness", "overlaps            0", "PING RTT p50"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("bench output lacks %q:\n%v", s, r)
		}
	}
	if k := leftovers(t, own, "dlock-bench-*"); len(k) > 0 {
		t.Errorf("bench left keys behind: %v", k)
	}
	expectCode(t, dlockRun(t, nil, onSrv("bench", "--clients", "0")...), 2)
}

// TestDemoElection: the leader is killed, paused and resigns; every
// takeover leads to a higher term, and no two leaders wrote in one term.
// On a server of its own: the leftover check looks at every demo's keys.
func TestDemoElection(t *testing.T) {
	t.Parallel()
	own := ownServer(t)
	r := dlockRun(t, nil, "--redis", own.URL(), "demo", "election", "--workers", "3", "--ttl", "1s")
	expectCode(t, r, 0)
	for _, want := range []string{"first election", "kill -9 worker-", "SIGSTOP worker-", "resign worker-",
		"resumed: ", "terms with two writers: 0", "takeover (median of 1)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%v", want, r)
		}
	}
	expectCode(t, dlockRun(t, nil, onSrv("demo", "election", "--workers", "1")...), 2)
	if k := leftovers(t, own, "dlock-demo-*"); len(k) > 0 {
		t.Errorf("the demo left keys behind: %v", k)
	}
}
