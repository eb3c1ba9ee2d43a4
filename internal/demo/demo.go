// Package demo is what `dlock demo` runs: classic uses of a Redis lock (a
// flash sale, global ids, a rate limit, leader election), each played by
// several worker processes against a real Redis, once without a lock, once
// with dlock and once with a script, side by side.
//
// The package is the scenarios and the workers' code; the dlock command
// owns the flags, the connection to Redis and how a worker process is
// started (the same program again, with a hidden subcommand that calls
// Work).
package demo

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/benchkit"
	"github.com/redis/go-redis/v9"
)

var (
	// ErrOptions is the error of options Run cannot run (see Options.Check).
	ErrOptions = errors.New("demo: bad options")
	// ErrRedis is the error of a Redis command of the demo itself (not of
	// a worker) that failed.
	ErrRedis = errors.New("demo: Redis failed")
	// ErrInexact is the error of a locked or atomic mode whose result was
	// not exact: a bug in dlock or in the demo.
	ErrInexact = errors.New("a locked or atomic mode was not exact: this is a bug, please report it")
	// ErrBadSpec is the error of Work given a spec it cannot run.
	ErrBadSpec = errors.New("demo worker: bad spec")
)

// Options are the parameters of a run, one for each flag of `dlock demo`.
type Options struct {
	Scenario string   // flashsale (default), ids, ratelimit or election
	Modes    []string // the scenario's modes to run; nil: all of them

	Workers   int           // worker processes (candidates in the election)
	Buyers    int           // concurrent clients per worker
	Work      time.Duration // simulated work between read and write
	TTL       time.Duration // lock TTL; 0: 10s, or 2s in the election
	Stock     int           // flashsale: items in stock
	Customers int           // flashsale: customers each trying to buy one item
	Segments  int           // flashsale: segments of the segmented mode
	IDs       int           // ids: ids each client takes
	IPs       int           // ratelimit: client IPs
	Limit     int           // ratelimit: requests per IP per minute
	Requests  int           // ratelimit: requests each client sends
	Rounds    int           // election: rounds of kill -9, SIGSTOP and resign
}

// Defaults returns the options of `dlock demo` without flags.
func Defaults() Options {
	return Options{Scenario: "flashsale", Workers: 4, Buyers: 8, Work: time.Millisecond, Stock: 500, Customers: 2000,
		Segments: 8, IDs: 40, IPs: 4, Limit: 25, Requests: 30, Rounds: 1}
}

// Default lock TTLs: a takeover after a crash takes about a TTL, so the
// election's is short.
const (
	DefaultTTL         = 10 * time.Second
	DefaultElectionTTL = 2 * time.Second
)

var scenarioModes = map[string][]string{
	"flashsale": {"none", "lock", "segmented", "atomic"},
	"ids":       {"none", "lock", "atomic"},
	"ratelimit": {"none", "lock", "atomic"},
	"election":  {"election"},
}

// Scenario returns the name of a scenario as Options.Scenario wants it
// ("flash-sale" and "sale" are flashsale; case does not matter), or an
// error wrapping ErrOptions if there is no such scenario.
func Scenario(name string) (string, error) {
	s := strings.ReplaceAll(strings.ToLower(name), "-", "")
	if s == "sale" {
		s = "flashsale"
	}
	if _, ok := scenarioModes[s]; !ok {
		return "", unknownScenario(name)
	}
	return s, nil
}

func unknownScenario(name string) error {
	return &kindError{kind: ErrOptions, msg: fmt.Sprintf("unknown scenario %q (want flashsale, ids, ratelimit or election)", name)}
}

// Check reports the first option Run cannot run, as an error wrapping
// ErrOptions that names the flag of `dlock demo`.
func (o Options) Check() error {
	bad := func(format string, args ...any) error {
		return &kindError{kind: ErrOptions, msg: fmt.Sprintf(format, args...)}
	}
	all, ok := scenarioModes[o.Scenario]
	if !ok {
		return unknownScenario(o.Scenario)
	}
	for _, m := range o.Modes {
		if !slices.Contains(all, m) {
			return bad("mode %q: %s has %s", m, o.Scenario, strings.Join(all, ", "))
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"workers", o.Workers}, {"buyers", o.Buyers}, {"stock", o.Stock}, {"customers", o.Customers}, {"segments", o.Segments},
		{"ids", o.IDs}, {"ips", o.IPs}, {"limit", o.Limit}, {"requests", o.Requests}, {"rounds", o.Rounds}} {
		if n.v < 1 {
			return bad("--%s must be at least 1", n.name)
		}
	}
	if o.TTL != 0 && o.TTL < time.Millisecond {
		return bad("--ttl must be at least 1ms")
	}
	if o.Work < 0 {
		return bad("--work must not be negative")
	}
	if o.Scenario == "election" && o.Workers < 2 {
		return bad("election: --workers must be at least 2")
	}
	return nil
}

// Env is where a run happens: the caller's connection, output and workers.
type Env struct {
	RDB   redis.UniversalClient // the demo's own connection (workers make theirs)
	Where string                // the Redis, as it is named in the output
	// NS is a key namespace of the run's own, also the workers' dlock
	// prefix. The caller deletes its keys afterwards.
	NS     string
	Stdout io.Writer
	TTY    bool // Stdout is a terminal: show progress while a mode runs
	// Command returns the command that starts one worker process: a
	// program that calls Work with spec, its stdin and its stdout, and a
	// connection to the same Redis. Run sets its Stdin and Stdout.
	Command func(spec string) *exec.Cmd
	// AllowEviction runs the demo's locks on a Redis that may evict keys
	// (dlock.Options.AllowEviction): its few small keys are not at risk.
	AllowEviction bool
}

// Run runs the scenario of o. Its errors: ErrOptions (also for an Env
// without RDB, Stdout or Command), ErrInexact, ErrRedis (wrapped), the
// context's error, and a worker's failure.
func Run(ctx context.Context, env Env, o Options) error {
	if err := o.Check(); err != nil {
		return err
	}
	if env.RDB == nil || env.Stdout == nil || env.Command == nil {
		return &kindError{kind: ErrOptions, msg: "the Env needs RDB, Stdout and Command"}
	}
	if o.Modes == nil {
		o.Modes = scenarioModes[o.Scenario]
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
		if o.Scenario == "election" {
			o.TTL = DefaultElectionTTL
		}
	}
	d := &demo{env: env, o: o, out: env.Stdout}
	switch o.Scenario {
	case "flashsale":
		return d.flashSale(ctx)
	case "ids":
		return d.ids(ctx)
	case "ratelimit":
		return d.rateLimit(ctx)
	}
	return d.election(ctx)
}

// demo is one run of a scenario.
type demo struct {
	env Env
	o   Options
	out io.Writer
}

// spec tells a worker what to do. It travels as JSON on the worker's
// command line (it holds no secrets).
type spec struct {
	Scenario string `json:"scenario"`
	Mode     string `json:"mode,omitempty"`
	NS       string `json:"ns"` // key namespace and dlock prefix
	// AllowEviction: see Env.
	AllowEviction bool          `json:"allow_eviction,omitempty"`
	TTL           time.Duration `json:"ttl"`
	Buyers        int           `json:"buyers,omitempty"`
	Work          time.Duration `json:"work,omitempty"`
	Segments      int           `json:"segments,omitempty"`
	Customers     int           `json:"customers,omitempty"` // this worker's share
	IDs           int           `json:"ids,omitempty"`
	IPs           int           `json:"ips,omitempty"`
	Limit         int           `json:"limit,omitempty"`
	Requests      int           `json:"requests,omitempty"`
	// The election.
	ID   string        `json:"id,omitempty"`
	Act  time.Duration `json:"act,omitempty"` // how often a leader writes
	Name string        `json:"name,omitempty"`
}

// result is what a worker reports, as one JSON line on stdout.
type result struct {
	Ops      int64            `json:"ops"`      // purchases, ids taken, requests allowed
	Requests int64            `json:"requests"` // ratelimit: requests sent
	Waits    uint64           `json:"waits"`    // Lock calls that found the key held
	IDs      []int64          `json:"ids,omitempty"`
	PerIP    map[string]int64 `json:"per_ip,omitempty"`
	Err      string           `json:"err,omitempty"`
}

func (d *demo) spec(mode string) spec {
	o := d.o
	return spec{Scenario: o.Scenario, Mode: mode, NS: d.env.NS, AllowEviction: d.env.AllowEviction, Buyers: o.Buyers, Work: o.Work, TTL: o.TTL,
		Segments: o.Segments, IDs: o.IDs, IPs: o.IPs, Limit: o.Limit, Requests: o.Requests}
}

// start starts one worker with s, its stdin and stdout piped.
func (d *demo) start(s spec) (cmd *exec.Cmd, stdin io.WriteCloser, stdout io.ReadCloser, err error) {
	js, _ := json.Marshal(s)
	cmd = d.env.Command(string(js))
	if stdin, err = cmd.StdinPipe(); err != nil {
		return nil, nil, nil, err
	}
	if stdout, err = cmd.StdoutPipe(); err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, fmt.Errorf("starting a worker (%s): %w", cmd.Path, err)
	}
	return cmd, stdin, stdout, nil
}

// modeRun is the outcome of one mode: every worker's result and the time
// from "go" to the last result.
type modeRun struct {
	mode    string
	results []result
	elapsed time.Duration
}

func (m modeRun) sum(f func(result) int64) int64 {
	var n int64
	for _, r := range m.results {
		n += f(r)
	}
	return n
}

func (m modeRun) waits() uint64 {
	var n uint64
	for _, r := range m.results {
		n += r.Waits
	}
	return n
}

// runMode starts the workers of one mode, waits until all are connected,
// starts them together and collects their results. status, if not nil,
// describes progress for the terminal.
func (d *demo) runMode(ctx context.Context, s spec, status func(context.Context) string) (modeRun, error) {
	type worker struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Reader
	}
	var workers []*worker
	defer func() {
		for _, w := range workers {
			_ = w.stdin.Close()
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
	}()
	o := d.o
	for i := range o.Workers {
		// Customers of the flash sale are split over the workers.
		s.Customers = o.Customers / o.Workers
		if i < o.Customers%o.Workers {
			s.Customers++
		}
		cmd, stdin, stdout, err := d.start(s)
		if err != nil {
			return modeRun{}, err
		}
		workers = append(workers, &worker{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)})
	}
	// Wait until every worker has connected and prepared.
	ready := make(chan error, len(workers))
	for _, w := range workers {
		go func() {
			line, err := w.out.ReadString('\n')
			if err == nil && strings.TrimSpace(line) != "ready" {
				err = fmt.Errorf("worker said %q", strings.TrimSpace(line))
			}
			ready <- err
		}()
	}
	timeout := time.After(60 * time.Second)
	for range workers {
		select {
		case err := <-ready:
			if err != nil {
				return modeRun{}, fmt.Errorf("a worker failed to start: %w", err)
			}
		case <-timeout:
			return modeRun{}, errors.New("workers did not get ready within 60s")
		case <-ctx.Done():
			return modeRun{}, ctx.Err()
		}
	}

	start := time.Now()
	for _, w := range workers {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			return modeRun{}, fmt.Errorf("starting a worker: %w", err)
		}
	}
	type reply struct {
		r   result
		err error
	}
	replies := make(chan reply, len(workers))
	for _, w := range workers {
		go func() {
			line, err := w.out.ReadString('\n')
			if err != nil {
				replies <- reply{err: fmt.Errorf("a worker died: %w", err)}
				return
			}
			var r result
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				replies <- reply{err: fmt.Errorf("a worker said %q", strings.TrimSpace(line))}
				return
			}
			if r.Err != "" {
				replies <- reply{err: errors.New(r.Err)}
				return
			}
			replies <- reply{r: r}
		}()
	}
	run := modeRun{mode: s.Mode}
	prog := d.progress(ctx, s.Mode, start, status)
	defer prog.stop()
	for range workers {
		select {
		case rep := <-replies:
			if rep.err != nil {
				return modeRun{}, rep.err
			}
			run.results = append(run.results, rep.r)
		case <-ctx.Done():
			return modeRun{}, ctx.Err()
		}
	}
	run.elapsed = time.Since(start)
	return run, nil
}

// progressLine shows a status line on a terminal while a mode runs longer
// than a second. Nothing is shown when stdout is not a terminal.
type progressLine struct {
	stopOnce sync.Once
	done     chan struct{}
	finished chan struct{}
}

func (d *demo) progress(ctx context.Context, mode string, start time.Time, status func(context.Context) string) *progressLine {
	p := &progressLine{done: make(chan struct{}), finished: make(chan struct{})}
	if !d.env.TTY {
		close(p.finished)
		return p
	}
	go func() {
		defer close(p.finished)
		shown := false
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				if shown {
					fmt.Fprint(d.out, "\r\033[K")
				}
				return
			case <-t.C:
				el := time.Since(start)
				if el < time.Second {
					continue
				}
				line := fmt.Sprintf("  running %-10s %5.1fs", mode, el.Seconds())
				if status != nil {
					line += "  " + status(ctx)
				}
				fmt.Fprint(d.out, "\r\033[K"+line)
				shown = true
			}
		}
	}()
	return p
}

func (p *progressLine) stop() {
	p.stopOnce.Do(func() { close(p.done) })
	<-p.finished
}

// Key names shared by the parent and the workers.
func stockKey(ns, mode string) string           { return ns + ":" + mode + ":stock" }
func segmentKey(ns, mode string, i int) string  { return ns + ":" + mode + ":stock:" + strconv.Itoa(i) }
func idKey(ns, mode string) string              { return ns + ":" + mode + ":id" }
func rateKey(ns, mode string, ip string) string { return ns + ":" + mode + ":requests:" + ip }
func lockKeyOf(dataKey string) string           { return dataKey + ":lock" }
func ipName(i int) string                       { return fmt.Sprintf("10.0.0.%d", i+1) }

func (d *demo) header(format string, args ...any) { fmt.Fprintf(d.out, format, args...) }

func (d *demo) flashSale(ctx context.Context) error {
	o := d.o
	d.header("Flash sale: %d items in stock, %d customers each try to buy one, served by\n",
		o.Stock, o.Customers)
	d.header("%d worker processes × %d concurrent handlers. A purchase reads the stock, checks it is > 0,\n", o.Workers, o.Buyers)
	if o.Work > 0 {
		d.header("works for %v (payment, order record: --work), and writes back stock-1.\n", o.Work)
	} else {
		d.header("and writes back stock-1.\n")
	}
	d.header("Redis: %s\n\n", d.env.Where)
	d.header("%-10s %7s %9s %10s %12s %11s\n", "mode", "sold", "oversold", "duration", "purchases/s", "lock waits")
	bad := false
	for _, mode := range o.Modes {
		// Fresh stock for each mode.
		var stockKeys []string
		if mode == "segmented" {
			per, extra := o.Stock/o.Segments, o.Stock%o.Segments
			for i := range o.Segments {
				n := per
				if i < extra {
					n++
				}
				k := segmentKey(d.env.NS, mode, i)
				stockKeys = append(stockKeys, k)
				if err := d.env.RDB.Set(ctx, k, n, 0).Err(); err != nil {
					return d.redisErr(err)
				}
			}
		} else {
			k := stockKey(d.env.NS, mode)
			stockKeys = append(stockKeys, k)
			if err := d.env.RDB.Set(ctx, k, o.Stock, 0).Err(); err != nil {
				return d.redisErr(err)
			}
		}
		status := func(ctx context.Context) string {
			var left int64
			for _, k := range stockKeys {
				n, _ := d.env.RDB.Get(ctx, k).Int64()
				left += n
			}
			return fmt.Sprintf("stock left %d", left)
		}
		run, err := d.runMode(ctx, d.spec(mode), status)
		if err != nil {
			return modeErr(ctx, mode, err)
		}
		sold := run.sum(func(r result) int64 { return r.Ops })
		over := max(0, sold-int64(o.Stock))
		if mode != "none" && (over > 0 || sold != int64(o.Stock)) {
			bad = true
		}
		d.header("%-10s %7d %9d %10s %12.0f %11s\n", mode, sold, over, benchkit.FormatDuration(run.elapsed),
			float64(sold)/run.elapsed.Seconds(), waitsText(mode, run.waits()))
	}
	d.header("\n")
	d.legend(map[string]string{
		"none":      "no lock: handlers read the same stock and each sells from it; decrements are lost: oversold",
		"lock":      "one dlock lock on the item around read-check-write: exact",
		"segmented": fmt.Sprintf("stock split over %d keys, each with its own lock (a segmented lock, 分段锁): exact, less waiting", o.Segments),
		"atomic":    "check-and-decrement in one Lua script: exact and fastest when the whole critical section fits in Redis",
	})
	d.header("lock waits: Lock calls that found the lock held and waited for it.\n")
	return verdict(bad)
}

func (d *demo) ids(ctx context.Context) error {
	o := d.o
	total := o.Workers * o.Buyers * o.IDs
	d.header("Global ids: %d worker processes × %d clients each take %d ids (%d in all)\n", o.Workers, o.Buyers, o.IDs, total)
	d.header("by reading the last id, adding one and writing it back.\n")
	d.header("Redis: %s\n\n", d.env.Where)
	d.header("%-10s %7s %11s %10s %9s %11s\n", "mode", "ids", "duplicates", "duration", "ids/s", "lock waits")
	bad := false
	for _, mode := range o.Modes {
		if err := d.env.RDB.Set(ctx, idKey(d.env.NS, mode), 0, 0).Err(); err != nil {
			return d.redisErr(err)
		}
		run, err := d.runMode(ctx, d.spec(mode), nil)
		if err != nil {
			return modeErr(ctx, mode, err)
		}
		seen := map[int64]bool{}
		n := 0
		for _, r := range run.results {
			for _, id := range r.IDs {
				n++
				seen[id] = true
			}
		}
		dups := n - len(seen)
		if mode != "none" && (dups > 0 || n != total) {
			bad = true
		}
		d.header("%-10s %7d %11d %10s %9.0f %11s\n", mode, n, dups, benchkit.FormatDuration(run.elapsed),
			float64(n)/run.elapsed.Seconds(), waitsText(mode, run.waits()))
	}
	d.header("\n")
	d.legend(map[string]string{
		"none":   "no lock: clients read the same last id and hand out the same next one",
		"lock":   "read-increment-write under one dlock lock: no duplicates",
		"atomic": "INCR: no duplicates, fastest; what to use when the id lives in Redis",
	})
	return verdict(bad)
}

func (d *demo) rateLimit(ctx context.Context) error {
	o := d.o
	total := o.Workers * o.Buyers * o.Requests
	d.header("Rate limit: at most %d requests per IP per minute; %d worker processes × %d clients\n", o.Limit, o.Workers, o.Buyers)
	d.header("send %d requests each (%d in all) spread over %d IPs. A request reads the IP's count, checks it is\n", o.Requests, total, o.IPs)
	d.header("below the limit, and writes back count+1.\n")
	d.header("Redis: %s\n\n", d.env.Where)
	d.header("%-10s %9s %8s %11s %10s %7s %11s\n", "mode", "requests", "allowed", "over limit", "duration", "req/s", "lock waits")
	bad := false
	for _, mode := range o.Modes {
		run, err := d.runMode(ctx, d.spec(mode), nil)
		if err != nil {
			return modeErr(ctx, mode, err)
		}
		perIP := map[string]int64{}
		for _, r := range run.results {
			for ip, n := range r.PerIP {
				perIP[ip] += n
			}
		}
		var allowed, over int64
		for _, n := range perIP {
			allowed += n
			over += max(0, n-int64(o.Limit))
		}
		reqs := run.sum(func(r result) int64 { return r.Requests })
		if mode != "none" && over > 0 {
			bad = true
		}
		d.header("%-10s %9d %8d %11d %10s %7.0f %11s\n", mode, reqs, allowed, over, benchkit.FormatDuration(run.elapsed),
			float64(reqs)/run.elapsed.Seconds(), waitsText(mode, run.waits()))
	}
	d.header("\n")
	d.legend(map[string]string{
		"none":   "no lock: concurrent requests read the same count and all pass",
		"lock":   "read-check-write of the IP's counter under a per-IP dlock lock: never over the limit",
		"atomic": "check-and-INCR in one Lua script: never over the limit, fastest",
	})
	return verdict(bad)
}

func (d *demo) legend(text map[string]string) {
	for _, m := range d.o.Modes {
		d.header("%-10s %s\n", m+":", text[m])
	}
}

func verdict(bad bool) error {
	if bad {
		return ErrInexact
	}
	return nil
}

func (d *demo) redisErr(err error) error {
	return &kindError{kind: ErrRedis, msg: fmt.Sprintf("Redis at %s failed: %v", d.env.Where, err), err: err}
}

// kindError is an error of one of the package's kinds (errors.Is) with a
// message of its own.
type kindError struct {
	kind error
	msg  string
	err  error
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }
func (e *kindError) Unwrap() error        { return e.err }

// modeErr is the error of a mode that could not finish.
func modeErr(ctx context.Context, mode string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("mode %s: %w", mode, err)
}

func waitsText(mode string, n uint64) string {
	if mode == "none" || mode == "atomic" {
		return "-"
	}
	return strconv.FormatUint(n, 10)
}
