package main

import (
	"context"
	"fmt"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/benchkit"
	"github.com/redis/go-redis/v9"
)

const usageBench = `Usage:
  dlock bench [flags]

Contention benchmark of dlock alone against the configured Redis: --clients
clients (each with its own connections and dlock Client, as separate
processes would have) loop for --duration: Lock a key (one of --keys, at
random), hold it for --hold, Unlock. Reports:

  critical sections/s  completed lock-hold-unlock cycles per second
  hand-off p50/p99     from one holder starting its release to the next
                       holder's Lock returning (for callers already waiting)
  acquire p50/p99      from calling Lock to its return, waiting included
  commands/section     Redis commands per critical section, from INFO
                       commandstats before and after (commands run inside
                       scripts count too; INFO and PING are left out). Counted
                       server-wide: on a busy shared Redis, other traffic
                       inflates it
  fairness             fewest and most critical sections of any one client
  overlaps             critical sections that began while another client was
                       inside one on the same key: must be 0
  PING RTT p50         measured during the run on a separate connection, and
                       before it (idle), to put the latencies in scale

Redis: as for every command; like demo, with no URL given and nothing
answering at 127.0.0.1:6379, a private redis-server is started for the run.
Keys live under a unique prefix (dlock-bench-*) and are deleted at the end.

Flags:
  --clients N         contending clients. Default: 8
  --hold DURATION     time inside each critical section. Default: 0
  --duration DURATION how long to run. Default: 3s
  --keys N            number of lock keys. Default: 1
  --ttl DURATION      lock TTL. Default: 10s
  --json              print the result as one JSON object
  --redis URL         see 'dlock help'

Exit codes: 0 ok, 1 overlaps or errors were seen, 2 usage, 125 no Redis, 130 interrupted.
`

func (a *app) cmdBench(args []string) int {
	clients, keys := 8, 1
	hold, duration, ttl := durationValue{}, durationValue{d: 3 * time.Second}, durationValue{d: 10 * time.Second}
	var asJSON bool
	fs := newFlagSet("bench")
	a.globalFlags(fs)
	intFlags(fs, &clients, "clients")
	intFlags(fs, &keys, "keys")
	durationFlags(fs, &hold, "hold")
	durationFlags(fs, &duration, "duration")
	durationFlags(fs, &ttl, "ttl")
	boolFlags(fs, &asJSON, "json")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if isHelp(err) {
			return a.helpFor("bench")
		}
		return a.usageErr("bench", "bench: %v", err)
	}
	switch {
	case len(pos) > 0:
		return a.usageErr("bench", "bench: unexpected argument %q", pos[0])
	case clients < 1 || keys < 1:
		return a.usageErr("bench", "bench: --clients and --keys must be at least 1")
	case duration.d <= 0:
		return a.usageErr("bench", "bench: --duration must be positive")
	case ttl.d < time.Millisecond:
		return a.usageErr("bench", "bench: --ttl must be at least 1ms")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	e, rdb, stopServer, code := a.connectOrStart(ctx)
	if code != exitOK {
		return code
	}
	defer stopServer()
	defer rdb.Close()

	if err := evicting(ctx, rdb); err != nil && !a.allowEviction {
		a.errorf("bench: %s", evictionMsg(err))
		return exitFailed
	}
	ns, cleanup := a.scratch(rdb, "bench")
	defer cleanup()
	keyNames := make([]string, keys)
	for i := range keyNames {
		keyNames[i] = fmt.Sprintf("%s:key:%d", ns, i)
	}

	cfg := benchkit.Config{
		Clients:  clients,
		Keys:     keyNames,
		Hold:     hold.d,
		Duration: duration.d,
		Redis:    rdb,
		NewClient: func(int) (benchkit.Client, error) {
			r := e.newClient()
			c, err := dlock.New(r, dlock.Options{Prefix: ns, TTL: ttl.d, AllowEviction: a.allowEviction})
			if err != nil {
				_ = r.Close()
				return benchkit.Client{}, err
			}
			return benchkit.Client{
				Acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
					lk, err := c.Lock(ctx, key)
					if err != nil {
						return nil, err
					}
					return lk.Unlock, nil
				},
				Close: func() error { _ = c.Close(); return r.Close() },
			}, nil
		},
	}
	tty := !asJSON && isTerminal(a.stdout)
	if tty && duration.d > 2*time.Second {
		cfg.Progress = func(el time.Duration, n int64) {
			fmt.Fprintf(a.stdout, "\r\033[K  %4.1fs / %v  %d critical sections", el.Seconds(), duration.d, n)
		}
	}
	server, version := serverVersion(ctx, rdb)
	res, err := benchkit.Run(ctx, cfg)
	if cfg.Progress != nil {
		fmt.Fprint(a.stdout, "\r\033[K")
	}
	if ctx.Err() != nil {
		a.errorf("bench: interrupted")
		return 130
	}
	if err != nil {
		a.errorf("bench: Redis at %s: %v", e.where(), err)
		return exitFailed
	}
	failed := res.Overlaps > 0 || res.AcquireErrors > 0 || res.ReleaseErrors > 0
	if asJSON {
		type out struct {
			Redis        string `json:"redis"`
			Server       string `json:"server,omitempty"` // "Redis 7.0.15", "Valkey 8.0.1"
			RedisVersion string `json:"redis_version,omitempty"`
			TTLms        int64  `json:"ttl_ms"`
			benchkit.Report
		}
		a.printJSON(out{Redis: e.display, Server: server, RedisVersion: version, TTLms: ttl.d.Milliseconds(), Report: res.Report()})
	} else {
		a.printBench(e, server, ttl.d, res)
	}
	if failed {
		if res.Overlaps > 0 {
			a.errorf("bench: %d overlapping critical sections: the lock did not exclude", res.Overlaps)
		}
		if res.FirstError != nil {
			a.errorf("bench: %d acquire and %d release errors; first: %v", res.AcquireErrors, res.ReleaseErrors, res.FirstError)
		}
		return exitNotAcquired
	}
	return exitOK
}

// serverVersion returns the server's name and release ("Valkey 8.0.1") and
// its INFO redis_version (which Valkey sets to the Redis release it is
// compatible with), or "" for what it cannot tell.
func serverVersion(ctx context.Context, rdb redis.UniversalClient) (server, redisVersion string) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", ""
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			redisVersion = v
		}
	}
	return benchkit.ServerVersion(info), redisVersion
}

func (a *app) printBench(e *endpoint, server string, ttl time.Duration, r benchkit.Result) {
	w := a.stdout
	plural := func(n int, s string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, s)
		}
		return fmt.Sprintf("%d %ss", n, s)
	}
	fmt.Fprintf(w, "dlock bench: %s, %s, hold %v, ttl %v, %v\n", plural(r.Clients, "client"), plural(r.Keys, "key"), r.Hold, ttl, r.Elapsed.Round(time.Millisecond))
	if server != "" {
		fmt.Fprintf(w, "%s at %s\n\n", server, e.where())
	} else {
		fmt.Fprintf(w, "Redis at %s\n\n", e.where())
	}
	fmt.Fprintf(w, "  critical sections   %d  (%.0f/s)\n", r.Sections, r.PerSecond())
	fmt.Fprintf(w, "  hand-off p50 / p99  %s / %s  (release → next holder's Lock returns; %d samples)\n",
		benchkit.FormatDuration(r.Handoff.P50), benchkit.FormatDuration(r.Handoff.P99), r.Handoff.N)
	fmt.Fprintf(w, "  acquire  p50 / p99  %s / %s  (Lock call → return, waiting included)\n", benchkit.FormatDuration(r.Acquire.P50), benchkit.FormatDuration(r.Acquire.P99))
	if cps := r.CommandsPerSection(); cps >= 0 {
		fmt.Fprintf(w, "  commands / section  %.2f  (%s; INFO commandstats, server-wide)\n", cps, topCommands(r, 6))
	} else {
		fmt.Fprintf(w, "  commands / section  unknown (INFO commandstats not available)\n")
	}
	lo, hi := r.Fairness()
	fmt.Fprintf(w, "  fairness            min %d / max %d critical sections per client\n", lo, hi)
	fmt.Fprintf(w, "  overlaps            %d\n", r.Overlaps)
	fmt.Fprintf(w, "  PING RTT p50        %s during the run, %s idle\n", benchkit.FormatDuration(r.Ping.P50), benchkit.FormatDuration(r.PingIdle.P50))
	if r.AcquireErrors+r.ReleaseErrors > 0 {
		fmt.Fprintf(w, "  errors              %d acquire, %d release\n", r.AcquireErrors, r.ReleaseErrors)
	}
}

// topCommands names the n most frequent commands per critical section.
func topCommands(r benchkit.Result, n int) string {
	type kv struct {
		name string
		n    int64
	}
	var all []kv
	for k, v := range r.ByCommand {
		all = append(all, kv{k, v})
	}
	slices.SortFunc(all, func(a, b kv) int {
		if a.n != b.n {
			return int(b.n - a.n)
		}
		return strings.Compare(a.name, b.name)
	})
	var parts []string
	for i, c := range all {
		if i == n {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", c.name, float64(c.n)/float64(max(r.Sections, 1))))
	}
	return strings.Join(parts, ", ")
}
