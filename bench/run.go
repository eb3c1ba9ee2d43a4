package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/benchkit"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A scenario is one kind of run.
type scenario struct {
	Name    string `json:"name"`
	Desc    string `json:"description"`
	Clients int    `json:"clients"` // goroutines (shared) or processes
	// Shared: the goroutines share one lock client and each has a key of
	// its own (uncontended). Otherwise each client is a separate
	// "process" with its own connections and all want one key.
	Shared bool          `json:"shared_client"`
	Drain  bool          `json:"drain"`
	Hold   time.Duration `json:"-"`
	// Duration is the default length; --duration overrides it.
	Duration time.Duration `json:"-"`
}

func scenarios() []scenario {
	const s = time.Second
	return []scenario{
		{Name: "uncontended-1", Clients: 1, Shared: true, Duration: 2 * s,
			Desc: "acquire+release pairs, 1 goroutine, its own key"},
		{Name: "uncontended-16", Clients: 16, Shared: true, Duration: 2 * s,
			Desc: "acquire+release pairs, 16 goroutines sharing one client, a key each"},
		{Name: "uncontended-64", Clients: 64, Shared: true, Duration: 2 * s,
			Desc: "acquire+release pairs, 64 goroutines sharing one client, a key each"},
		{Name: "contended-16-hold0", Clients: 16, Duration: 2 * s,
			Desc: "16 processes on one key, empty critical section, re-acquire at once"},
		{Name: "contended-16-hold1ms", Clients: 16, Hold: time.Millisecond, Duration: 5 * s,
			Desc: "16 processes on one key, 1ms critical section, re-acquire at once (the fairness goal: 5s)"},
		{Name: "contended-128-hold0", Clients: 128, Duration: 2 * s,
			Desc: "128 processes on one key, empty critical section, re-acquire at once"},
		{Name: "contended-128-hold1ms", Clients: 128, Hold: time.Millisecond, Duration: 2 * s,
			Desc: "128 processes on one key, 1ms critical section, re-acquire at once"},
		{Name: "drain-16", Clients: 16, Drain: true, Hold: time.Millisecond, Duration: 2 * s,
			Desc: "rounds: 16 processes start together, each needs the key once (1ms), every release has waiters"},
		{Name: "drain-128", Clients: 128, Drain: true, Hold: time.Millisecond, Duration: 2 * s,
			Desc: "rounds: 128 processes start together, each needs the key once (1ms)"},
		{Name: "drain-256", Clients: 256, Drain: true, Hold: time.Millisecond, Duration: 2 * s,
			Desc: "rounds: 256 processes start together, each needs the key once (1ms)"},
	}
}

// options are the command-line settings of one benchmark.
type options struct {
	Duration     time.Duration  // per scenario; 0: each scenario's default
	RoundTimeout time.Duration  // bounds each drain round
	Scenarios    *regexp.Regexp // nil: all
	Libs         *regexp.Regexp // nil: all
	Quick        bool
	Runs         int       // runs of every scenario and library; 0 is 1
	Progress     io.Writer // nil: silent
}

// quickDuration is each scenario's length with --quick.
const quickDuration = 150 * time.Millisecond

// outcome is one library in one scenario.
type outcome struct {
	Scenario scenario
	Lib      lib
	Duration time.Duration // configured
	Res      benchkit.Result
	Err      error // the run could not be made at all (client or warm-up failed)
}

// Failures is what went wrong in a run that was made: acquisitions that
// failed (including the library giving up) or missed their drain round,
// and failed releases.
func (o outcome) Failures() int64 {
	return o.Res.AcquireErrors + o.Res.ReleaseErrors + o.Res.Missed
}

// machine describes where the benchmark ran.
type machine struct {
	Date          string `json:"date"`
	CPUs          int    `json:"cpus"`
	GOMAXPROCS    int    `json:"gomaxprocs"`
	GoVersion     string `json:"go_version"`
	OS            string `json:"os_arch"`
	RedisVersion  string `json:"server"` // "Redis 7.0.15", "Valkey 8.0.1"
	RedisAddr     string `json:"redis_addr"`
	LoadBefore    string `json:"loadavg_before"`
	LoadAfter     string `json:"loadavg_after"`
	TotalDuration string `json:"total_duration"`
	Command       string `json:"command"` // as "go run . FLAGS"
}

// benchmark is one run of every selected scenario for every selected
// library; Machine holds its own date, load and duration.
type benchmark struct {
	Machine  machine
	Opts     options
	Run      int // 1-based
	Outcomes []outcome
}

// series is the whole benchmark: opts.Runs runs, one after another.
// Machine is for all of them: the load before the first and after the
// last, the total time.
type series struct {
	Machine machine
	Opts    options
	Runs    []*benchmark
}

// outcomes returns the outcomes of every run.
func (s *series) outcomes() []outcome {
	var all []outcome
	for _, b := range s.Runs {
		all = append(all, b.Outcomes...)
	}
	return all
}

// command is how the benchmark was started: its arguments after the
// program's name (a temporary path under go run).
func command() string {
	if len(os.Args) < 2 {
		return "go run . (no flags: the defaults)"
	}
	return "go run . " + strings.Join(os.Args[1:], " ")
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// selected returns the scenarios and libraries opts selects.
func selected(opts options) ([]scenario, []lib) {
	var ss []scenario
	for _, s := range scenarios() {
		if opts.Scenarios == nil || opts.Scenarios.MatchString(s.Name) {
			ss = append(ss, s)
		}
	}
	var ls []lib
	for _, l := range libs() {
		if opts.Libs == nil || opts.Libs.MatchString(l.Name) {
			ls = append(ls, l)
		}
	}
	return ss, ls
}

// runAll starts a redis-server of its own and runs every selected
// scenario for every selected library, one after another, opts.Runs times:
// run 1 of every scenario and library, then run 2, and so on.
func runAll(ctx context.Context, opts options) (*series, error) {
	ss, ls := selected(opts)
	if len(ss) == 0 || len(ls) == 0 {
		return nil, errors.New("no scenario or no library selected")
	}
	if opts.RoundTimeout == 0 {
		opts.RoundTimeout = 10 * time.Second
	}
	opts.Runs = max(opts.Runs, 1)
	srv, err := redistest.StartMain(redistest.Config{})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	admin := srv.NewClient() // INFO, PING, FLUSHALL: not counted as round trips
	defer admin.Close()

	all := &series{Opts: opts, Machine: machine{
		Date:       time.Now().UTC().Format(time.RFC3339),
		CPUs:       runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion:  runtime.Version(),
		OS:         runtime.GOOS + "/" + runtime.GOARCH,
		RedisAddr:  srv.Addr(),
		LoadBefore: loadavg(),
		Command:    command(),
	}}
	if info, err := admin.Info(ctx, "server").Result(); err == nil {
		all.Machine.RedisVersion = benchkit.ServerVersion(info)
	}
	start := time.Now()
	for run := 1; run <= opts.Runs; run++ {
		b := &benchmark{Opts: opts, Run: run, Machine: all.Machine}
		b.Machine.Date = time.Now().UTC().Format(time.RFC3339)
		b.Machine.LoadBefore = loadavg()
		runStart := time.Now()
		err := runOnce(ctx, srv.Addr(), admin, b, ss, ls)
		b.Machine.LoadAfter = loadavg()
		b.Machine.TotalDuration = time.Since(runStart).Round(time.Second).String()
		if err != nil {
			return nil, err
		}
		all.Runs = append(all.Runs, b)
	}
	all.Machine.LoadAfter = loadavg()
	all.Machine.TotalDuration = time.Since(start).Round(time.Second).String()
	return all, ctx.Err()
}

// runOnce runs every scenario in ss for every library in ls into b.
func runOnce(ctx context.Context, addr string, admin *redis.Client, b *benchmark, ss []scenario, ls []lib) error {
	opts := b.Opts
	prefix := ""
	if opts.Runs > 1 {
		prefix = fmt.Sprintf("[run %d/%d] ", b.Run, opts.Runs)
	}
	total, n := len(ss)*len(ls), 0
	for _, s := range ss {
		for _, l := range ls {
			n++
			if err := ctx.Err(); err != nil {
				return err
			}
			o := runOne(ctx, addr, admin, s, l, fmt.Sprintf("%d:%d", b.Run, n), opts)
			b.Outcomes = append(b.Outcomes, o)
			if opts.Progress != nil {
				fmt.Fprintf(opts.Progress, "%s[%d/%d] %-22s %-22s %s\n", prefix, n, total, s.Name, l.Name, summary(o))
			}
			// Let the closed clients' goroutines and connections go, and
			// start the next run on an empty server.
			_ = admin.FlushAll(ctx).Err()
			runtime.GC()
			time.Sleep(100 * time.Millisecond)
		}
	}
	return ctx.Err()
}

func summary(o outcome) string {
	if o.Err != nil {
		return "FAILED: " + o.Err.Error()
	}
	r := o.Res
	s := fmt.Sprintf("%8.0f CS/s  hand-off p50 %6.3fms  %5.1f cmds/CS  %5.1f RT/CS  overlaps %d",
		r.PerSecond(), benchkit.MS(r.Handoff.P50), r.CommandsPerSection(), r.RoundTripsPerSection(), r.Overlaps)
	if f := o.Failures(); f > 0 {
		s += fmt.Sprintf("  failures %d (%v)", f, r.FirstError)
	}
	return s
}

// runOne runs one library in one scenario on fresh key names.
func runOne(ctx context.Context, addr string, admin *redis.Client, s scenario, l lib, id string, opts options) outcome {
	d := s.Duration
	switch {
	case opts.Duration > 0:
		d = opts.Duration
	case opts.Quick:
		d = quickDuration
	}
	o := outcome{Scenario: s, Lib: l, Duration: d}
	trips := new(benchkit.RoundTripCounter)
	base := fmt.Sprintf("bench:%s:%s", id, s.Name)
	cfg := benchkit.Config{
		Clients:      s.Clients,
		Hold:         s.Hold,
		Duration:     d,
		Redis:        admin,
		Drain:        s.Drain,
		RoundTimeout: opts.RoundTimeout,
		RoundTrips:   trips.Load,
		Keys:         []string{base},
	}
	var shared *locker
	if s.Shared {
		cfg.KeyPerClient = true
		cfg.Keys = make([]string, s.Clients)
		for i := range cfg.Keys {
			cfg.Keys[i] = fmt.Sprintf("%s:%d", base, i)
		}
		var err error
		if shared, err = l.open(addr, trips); err != nil {
			o.Err = err
			return o
		}
		defer shared.close()
		cfg.NewClient = func(int) (benchkit.Client, error) {
			return benchkit.Client{Acquire: shared.acquire}, nil
		}
	} else {
		cfg.NewClient = func(int) (benchkit.Client, error) {
			lk, err := l.open(addr, trips)
			if err != nil {
				return benchkit.Client{}, err
			}
			return benchkit.Client{Acquire: lk.acquire, Close: lk.close}, nil
		}
	}
	// Bound the whole run, warm-up included, so that nothing can hang.
	rctx, cancel := context.WithTimeout(ctx, d+opts.RoundTimeout+time.Minute)
	defer cancel()
	o.Res, o.Err = benchkit.Run(rctx, cfg)
	return o
}
