package demo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/demo"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var srv *redistest.Server

// workerArg makes this test binary a demo worker: the demo's workers are
// this binary started again with workerArg, the spec and the Redis URL,
// as the dlock command starts itself again with a hidden subcommand.
const workerArg = "demo-test-worker"

func TestMain(m *testing.M) {
	if len(os.Args) == 4 && os.Args[1] == workerArg {
		os.Exit(worker(os.Args[2], os.Args[3]))
	}
	os.Exit(redistest.RunShared(m, "demo", func(s *redistest.Server) { srv = s }))
}

func worker(spec, url string) int {
	opt, err := redis.ParseURL(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	if err := demo.Work(context.Background(), rdb, spec, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

// lockedBuffer collects the output of a run and its workers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// run runs o on the shared server in a namespace of its own and returns
// the output; the namespace's keys are checked and deleted afterwards.
func run(t *testing.T, o demo.Options) (string, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rdb := srv.Client(t)
	ns := "demo-test-" + strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	var out, stderr lockedBuffer
	env := demo.Env{RDB: rdb, Where: srv.Addr(), NS: ns, Stdout: &out,
		Command: func(spec string) *exec.Cmd {
			cmd := exec.Command(exe, workerArg, spec, srv.URL())
			cmd.Stderr = &stderr
			return cmd
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = demo.Run(ctx, env, o)
	if s := stderr.String(); s != "" {
		t.Logf("workers' stderr:\n%s", s)
	}
	keys, kerr := rdb.Keys(ctx, ns+"*").Result() // a tiny test keyspace
	if kerr != nil {
		t.Fatal(kerr)
	}
	if len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
	return out.String(), err
}

func TestOptionsCheck(t *testing.T) {
	t.Parallel()
	if err := demo.Defaults().Check(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		change func(*demo.Options)
		want   string
	}{
		{func(o *demo.Options) { o.Scenario = "bogus" }, `unknown scenario "bogus"`},
		{func(o *demo.Options) { o.Modes = []string{"lock", "bogus"} }, `mode "bogus": flashsale has none, lock, segmented, atomic`},
		{func(o *demo.Options) { o.Workers = 0 }, "--workers must be at least 1"},
		{func(o *demo.Options) { o.Segments = -1 }, "--segments must be at least 1"},
		{func(o *demo.Options) { o.Rounds = 0 }, "--rounds must be at least 1"},
		{func(o *demo.Options) { o.TTL = time.Microsecond }, "--ttl must be at least 1ms"},
		{func(o *demo.Options) { o.Work = -time.Second }, "--work must not be negative"},
		{func(o *demo.Options) { o.Scenario, o.Workers = "election", 1 }, "election: --workers must be at least 2"},
	} {
		o := demo.Defaults()
		c.change(&o)
		err := o.Check()
		if !errors.Is(err, demo.ErrOptions) || err.Error() != c.want && !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("want an ErrOptions %q, got %v", c.want, err)
		}
		// Run refuses them too, before it touches anything.
		if err := demo.Run(context.Background(), demo.Env{}, o); !errors.Is(err, demo.ErrOptions) {
			t.Errorf("Run with %q: got %v", c.want, err)
		}
	}
	// Good options, but nothing to run them with.
	if err := demo.Run(context.Background(), demo.Env{Stdout: &bytes.Buffer{}}, demo.Defaults()); !errors.Is(err, demo.ErrOptions) {
		t.Errorf("Run with an empty Env: want ErrOptions, got %v", err)
	}
	for in, want := range map[string]string{"flashsale": "flashsale", "Flash-Sale": "flashsale", "sale": "flashsale",
		"IDs": "ids", "rate-limit": "ratelimit", "election": "election"} {
		if got, err := demo.Scenario(in); got != want || err != nil {
			t.Errorf("Scenario(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := demo.Scenario("nosuch"); !errors.Is(err, demo.ErrOptions) ||
		err.Error() != `unknown scenario "nosuch" (want flashsale, ids, ratelimit or election)` {
		t.Errorf("Scenario(nosuch): %v", err)
	}
}

func TestWorkBadSpec(t *testing.T) {
	t.Parallel()
	rdb := srv.Client(t)
	for _, spec := range []string{
		"", "{", `{"scenario":"flashsale","mode":"lock","ns":"x","ttl":1000000000}`, // no buyers
		`{"scenario":"flashsale","mode":"bogus","ns":"x","ttl":1000000000,"buyers":1}`,
		`{"scenario":"flashsale","mode":"segmented","ns":"x","ttl":1000000000,"buyers":1}`, // no segments
		`{"scenario":"ratelimit","mode":"lock","ns":"x","ttl":1000000000,"buyers":1}`,      // no IPs
		`{"scenario":"election","ns":"x","ttl":1000000000}`,                                // no id, name, act
		`{"scenario":"ids","mode":"lock","ns":"x","buyers":1}`,                             // no TTL
	} {
		var out bytes.Buffer
		err := demo.Work(context.Background(), rdb, spec, strings.NewReader("go\n"), &out)
		if !errors.Is(err, demo.ErrBadSpec) {
			t.Errorf("Work(%s): want ErrBadSpec, got %v", spec, err)
		}
		if out.Len() > 0 {
			t.Errorf("Work(%s) said %q before refusing", spec, out.String())
		}
	}
	// No client: dlock's own error, no panic.
	for _, spec := range []string{`{"scenario":"ids","mode":"lock","ns":"x","ttl":1000000000,"buyers":1}`,
		`{"scenario":"election","ns":"x","ttl":1000000000,"id":"a","name":"n","act":1000000}`} {
		if err := demo.Work(context.Background(), nil, spec, strings.NewReader(""), &bytes.Buffer{}); !errors.Is(err, dlock.ErrNilClient) {
			t.Errorf("Work without a client: want ErrNilClient, got %v", err)
		}
	}
	// A worker whose demo goes away before "go" stops.
	err := demo.Work(context.Background(), rdb, `{"scenario":"ids","mode":"lock","ns":"x","ttl":1000000000,"buyers":1,"ids":1}`,
		strings.NewReader(""), &bytes.Buffer{})
	if !errors.Is(err, demo.ErrAbandoned) {
		t.Errorf("Work without go: want ErrAbandoned, got %v", err)
	}
}

// row returns the fields of the table row of mode in out.
func row(t *testing.T, out, mode string) []string {
	t.Helper()
	for l := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == mode {
			return f
		}
	}
	t.Fatalf("no row for %s in:\n%s", mode, out)
	return nil
}

func TestRunScenarios(t *testing.T) {
	t.Parallel()
	small := func(scenario string) demo.Options {
		o := demo.Defaults()
		o.Scenario, o.Workers, o.Buyers, o.Work = scenario, 2, 4, 2*time.Millisecond
		o.Stock, o.Customers, o.Segments = 30, 100, 3
		o.IDs, o.IPs, o.Limit, o.Requests = 10, 2, 5, 10
		return o
	}
	t.Run("flashsale", func(t *testing.T) {
		t.Parallel()
		out, err := run(t, small("flashsale"))
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, m := range []string{"lock", "segmented", "atomic"} {
			if f := row(t, out, m); f[1] != "30" || f[2] != "0" {
				t.Errorf("%s: sold %s, oversold %s; want 30 and 0:\n%s", m, f[1], f[2], out)
			}
		}
		if f := row(t, out, "none"); f[5] != "-" || row(t, out, "lock")[5] == "-" {
			t.Errorf("lock waits column:\n%s", out)
		}
	})
	t.Run("ids", func(t *testing.T) {
		t.Parallel()
		out, err := run(t, small("ids"))
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, m := range []string{"lock", "atomic"} {
			if f := row(t, out, m); f[1] != "80" || f[2] != "0" {
				t.Errorf("%s: %s ids, %s duplicates; want 80 and 0:\n%s", m, f[1], f[2], out)
			}
		}
	})
	t.Run("ratelimit", func(t *testing.T) {
		t.Parallel()
		o := small("ratelimit")
		o.Modes = []string{"lock", "atomic"}
		out, err := run(t, o)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, m := range o.Modes {
			if f := row(t, out, m); f[2] != "10" || f[3] != "0" {
				t.Errorf("%s: %s allowed, %s over; want 10 and 0:\n%s", m, f[2], f[3], out)
			}
		}
		if strings.Contains(out, "\nnone ") {
			t.Errorf("ran a mode not asked for:\n%s", out)
		}
	})
	t.Run("worker fails", func(t *testing.T) {
		t.Parallel()
		o := small("ids")
		o.Modes = []string{"lock"}
		exe, _ := os.Executable()
		env := demo.Env{RDB: srv.Client(t), Where: srv.Addr(), NS: "demo-test-fails", Stdout: &bytes.Buffer{},
			Command: func(spec string) *exec.Cmd {
				return exec.Command(exe, workerArg, spec, "redis://127.0.0.1:1/0?max_retries=-1") // a worker that cannot connect
			}}
		err := demo.Run(context.Background(), env, o)
		if err == nil || !strings.HasPrefix(err.Error(), "mode lock: ") || errors.Is(err, demo.ErrInexact) {
			t.Errorf("want a mode lock error, got %v", err)
		}
	})
}

// TestRunElection: the leader is killed, paused and resigns; every
// takeover leads to a higher term, and no two leaders wrote in one term.
func TestRunElection(t *testing.T) {
	t.Parallel()
	o := demo.Defaults()
	o.Scenario, o.Workers, o.TTL = "election", 3, 600*time.Millisecond
	out, err := run(t, o)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"first election", "kill -9 worker-", "SIGSTOP worker-", "resign worker-",
		"resumed: ", "terms with two writers: 0", "takeover (median of 1)", "(TTL 600ms)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
