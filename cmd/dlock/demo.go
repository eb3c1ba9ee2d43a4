package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/benchkit"
	"github.com/redis/go-redis/v9"
)

const usageDemo = `Usage:
  dlock demo [flashsale] [flags]     a flash sale (default)
  dlock demo ids [flags]             a global increasing id, read-modify-write
  dlock demo ratelimit [flags]       a per-IP request limit across processes
  dlock demo election [flags]        leader election: takeover after kill -9, SIGSTOP, resign

Runs a scenario of classic Redis-lock use cases against a real Redis with several
worker processes (this program, started again), once per mode, and prints
the modes side by side:

  none       no lock: read, check, modify, write back. Shows honestly what
             goes wrong when processes race (oversold items, duplicate ids,
             requests over the limit).
  lock       the same read-modify-write under one dlock lock: exact.
  segmented  (flashsale) the stock split over --segments keys, each with its
             own lock (a segmented lock, 分段锁): exact and faster,
             since buyers of different segments don't wait for each other.
  atomic     the whole check-and-update as one Lua script in Redis: exact
             and the fastest; the right answer when the critical section
             fits in Redis (locks are for when it does not).

Redis: as for every command (--redis, $DLOCK_REDIS_URL, $REDIS_URL, else
127.0.0.1:6379). If none was given and nothing answers at 127.0.0.1:6379,
demo starts a private redis-server from PATH for the run (and says so).
The demo keeps its keys under a unique prefix (dlock-demo-*) and deletes
them at the end; it never flushes anything.

Flags:
  --workers K       worker processes. Default: 4
  --buyers B        concurrent clients (request handlers) per worker. Default: 8
  --modes LIST      comma-separated modes to run. Default: all of the scenario's
  --work DURATION   simulated work between the read and the write (a payment,
                    a database call). Default: 1ms; with 0 the race window is
                    just the Redis round trips
  --ttl DURATION    lock TTL. Default: 10s
  flashsale:  --stock N (default 500), --customers N each trying to buy one
              item (default 2000), --segments S (default 8)
  ids:        --ids N   ids each client takes (default 40)
  ratelimit:  --ips N (default 4), --limit L requests per IP per minute
              (default 25), --requests N per client (default 30)
  election:   --workers K candidates (default 4), --ttl (default 2s), --rounds N
              (default 1) of kill -9, SIGSTOP and resign of the leader. Prints
              each takeover time (median over the rounds) and checks, with a
              fenced counter, that no two leaders wrote in one term
  --redis URL       see 'dlock help'

Exit codes: 0 every locked or atomic mode was exact; 1 one was not (a bug),
or a worker failed; 2 usage; 125 no Redis (and none could be started);
130 interrupted.
`

// workerCommand is the hidden subcommand demo workers run as.
const workerCommand = "__demo-worker"

// demoSpec tells a worker what to do. It travels as JSON on the worker's
// command line (it holds no secrets; the Redis URL goes in the environment).
type demoSpec struct {
	Scenario  string        `json:"scenario"`
	Mode      string        `json:"mode"`
	NS        string        `json:"ns"` // key namespace and dlock prefix
	Buyers    int           `json:"buyers"`
	Work      time.Duration `json:"work"`
	TTL       time.Duration `json:"ttl"`
	Segments  int           `json:"segments,omitempty"`
	Customers int           `json:"customers,omitempty"` // this worker's share
	IDs       int           `json:"ids,omitempty"`
	IPs       int           `json:"ips,omitempty"`
	Limit     int           `json:"limit,omitempty"`
	Requests  int           `json:"requests,omitempty"`
}

// demoResult is what a worker reports, as one JSON line on stdout.
type demoResult struct {
	Ops      int64            `json:"ops"`      // purchases, ids taken, requests allowed
	Requests int64            `json:"requests"` // ratelimit: requests sent
	Waits    uint64           `json:"waits"`    // Lock calls that found the key held
	IDs      []int64          `json:"ids,omitempty"`
	PerIP    map[string]int64 `json:"per_ip,omitempty"`
	Err      string           `json:"err,omitempty"`
}

type demoFlags struct {
	workers, buyers, stock, customers, segments, ids, ips, limit, requests int
	modes                                                                  string
	work, ttl                                                              durationValue
	rounds                                                                 int
}

var scenarioModes = map[string][]string{
	"flashsale": {"none", "lock", "segmented", "atomic"},
	"ids":       {"none", "lock", "atomic"},
	"ratelimit": {"none", "lock", "atomic"},
	"election":  {"election"},
}

func (a *app) cmdDemo(args []string) int {
	f := demoFlags{rounds: 1, workers: 4, buyers: 8, stock: 500, customers: 2000, segments: 8, ids: 40, ips: 4, limit: 25, requests: 30,
		ttl: durationValue{d: 10 * time.Second}, work: durationValue{d: time.Millisecond}}
	fs := newFlagSet("demo")
	a.globalFlags(fs)
	intFlags(fs, &f.workers, "workers")
	intFlags(fs, &f.buyers, "buyers")
	intFlags(fs, &f.stock, "stock")
	intFlags(fs, &f.customers, "customers")
	intFlags(fs, &f.segments, "segments")
	intFlags(fs, &f.ids, "ids")
	intFlags(fs, &f.ips, "ips")
	intFlags(fs, &f.limit, "limit")
	intFlags(fs, &f.requests, "requests")
	intFlags(fs, &f.rounds, "rounds")
	stringFlags(fs, &f.modes, "modes")
	durationFlags(fs, &f.work, "work")
	durationFlags(fs, &f.ttl, "ttl")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if isHelp(err) {
			return a.helpFor("demo")
		}
		return a.usageErr("demo", "demo: %v", err)
	}
	scenario := "flashsale"
	if len(pos) > 1 {
		return a.usageErr("demo", "demo: at most one scenario")
	}
	if len(pos) == 1 {
		scenario = strings.ReplaceAll(strings.ToLower(pos[0]), "-", "")
		if scenario == "sale" {
			scenario = "flashsale"
		}
	}
	all, ok := scenarioModes[scenario]
	if !ok {
		return a.usageErr("demo", "demo: unknown scenario %q (want flashsale, ids, ratelimit or election)", pos[0])
	}
	modes := all
	if f.modes != "" {
		modes = nil
		for m := range strings.SplitSeq(f.modes, ",") {
			m = strings.TrimSpace(m)
			if !slices.Contains(all, m) {
				return a.usageErr("demo", "demo: mode %q: %s has %s", m, scenario, strings.Join(all, ", "))
			}
			modes = append(modes, m)
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"workers", f.workers}, {"buyers", f.buyers}, {"stock", f.stock}, {"customers", f.customers}, {"segments", f.segments},
		{"ids", f.ids}, {"ips", f.ips}, {"limit", f.limit}, {"requests", f.requests}, {"rounds", f.rounds}} {
		if n.v < 1 {
			return a.usageErr("demo", "demo: --%s must be at least 1", n.name)
		}
	}
	if f.ttl.d < time.Millisecond {
		return a.usageErr("demo", "demo: --ttl must be at least 1ms")
	}
	if scenario == "election" {
		if !f.ttl.set {
			f.ttl.d = 2 * time.Second // takeovers after a crash take about a TTL
		}
		if f.workers < 2 {
			return a.usageErr("demo", "demo: election: --workers must be at least 2")
		}
	}

	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	e, rdb, stopServer, code := a.connectOrStart(ctx)
	if code != exitOK {
		return code
	}
	defer stopServer()
	defer rdb.Close()

	ns, cleanup := a.scratch(rdb, "demo")
	defer cleanup()

	d := &demo{a: a, e: e, rdb: rdb, url: e.raw, f: f, ns: ns, tty: isTerminal(os.Stdout)}
	switch scenario {
	case "flashsale":
		code = d.flashSale(ctx, modes)
	case "ids":
		code = d.ids(ctx, modes)
	case "ratelimit":
		code = d.rateLimit(ctx, modes)
	case "election":
		code = d.election(ctx)
	}
	if ctx.Err() != nil {
		a.errorf("demo: interrupted")
		return 130
	}
	return code
}

// demo is one run of a scenario.
type demo struct {
	a   *app
	e   *endpoint
	rdb redis.UniversalClient
	url string // raw URL, handed to workers in their environment
	f   demoFlags
	ns  string
	tty bool
}

func (d *demo) spec(scenario, mode string) demoSpec {
	return demoSpec{Scenario: scenario, Mode: mode, NS: d.ns, Buyers: d.f.buyers, Work: d.f.work.d, TTL: d.f.ttl.d,
		Segments: d.f.segments, IDs: d.f.ids, IPs: d.f.ips, Limit: d.f.limit, Requests: d.f.requests}
}

// modeRun is the outcome of one mode: every worker's result and the time
// from "go" to the last result.
type modeRun struct {
	mode    string
	results []demoResult
	elapsed time.Duration
}

func (m modeRun) sum(f func(demoResult) int64) int64 {
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
func (d *demo) runMode(ctx context.Context, spec demoSpec, status func(context.Context) string) (modeRun, error) {
	exe, err := os.Executable()
	if err != nil {
		return modeRun{}, err
	}
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
	env := append(os.Environ(), "DLOCK_REDIS_URL="+d.url)
	for i := range d.f.workers {
		// Customers of the flash sale are split over the workers.
		spec.Customers = d.f.customers / d.f.workers
		if i < d.f.customers%d.f.workers {
			spec.Customers++
		}
		specJSON, _ := json.Marshal(spec)
		cmd := exec.Command(exe, workerCommand, "--spec", string(specJSON))
		cmd.Env = env
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = childAttr() // Linux: a worker gets SIGTERM if dlock dies
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return modeRun{}, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return modeRun{}, err
		}
		if err := cmd.Start(); err != nil {
			return modeRun{}, fmt.Errorf("starting a worker (%s): %w", exe, err)
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
		r   demoResult
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
			var r demoResult
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
	run := modeRun{mode: spec.Mode}
	prog := d.progress(ctx, spec.Mode, start, status)
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

// progress shows a status line on a terminal while a mode runs longer than
// a second. Nothing is shown when stdout is not a terminal.
type progressLine struct {
	stopOnce sync.Once
	done     chan struct{}
	finished chan struct{}
}

func (d *demo) progress(ctx context.Context, mode string, start time.Time, status func(context.Context) string) *progressLine {
	p := &progressLine{done: make(chan struct{}), finished: make(chan struct{})}
	if !d.tty {
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
					fmt.Fprint(d.a.stdout, "\r\033[K")
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
				fmt.Fprint(d.a.stdout, "\r\033[K"+line)
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

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Key names shared by the parent and the workers.
func stockKey(ns, mode string) string             { return ns + ":" + mode + ":stock" }
func segmentKey(ns, mode string, i int) string    { return ns + ":" + mode + ":stock:" + strconv.Itoa(i) }
func idKey(ns, mode string) string                { return ns + ":" + mode + ":id" }
func rateKey(ns, mode string, ip string) string   { return ns + ":" + mode + ":requests:" + ip }
func lockKeyOf(dataKey string) string             { return dataKey + ":lock" }
func ipName(i int) string                         { return fmt.Sprintf("10.0.0.%d", i+1) }
func (d *demo) header(format string, args ...any) { fmt.Fprintf(d.a.stdout, format, args...) }

func (d *demo) flashSale(ctx context.Context, modes []string) int {
	f := d.f
	d.header("Flash sale: %d items in stock, %d customers each try to buy one, served by\n",
		f.stock, f.customers)
	d.header("%d worker processes × %d concurrent handlers. A purchase reads the stock, checks it is > 0,\n", f.workers, f.buyers)
	if f.work.d > 0 {
		d.header("works for %v (payment, order record: --work), and writes back stock-1.\n", f.work.d)
	} else {
		d.header("and writes back stock-1.\n")
	}
	d.header("Redis: %s\n\n", d.e.where())
	d.header("%-10s %7s %9s %10s %12s %11s\n", "mode", "sold", "oversold", "duration", "purchases/s", "lock waits")
	bad := false
	for _, mode := range modes {
		// Fresh stock for each mode.
		var stockKeys []string
		if mode == "segmented" {
			per, extra := f.stock/f.segments, f.stock%f.segments
			for i := range f.segments {
				n := per
				if i < extra {
					n++
				}
				k := segmentKey(d.ns, mode, i)
				stockKeys = append(stockKeys, k)
				if err := d.rdb.Set(ctx, k, n, 0).Err(); err != nil {
					return d.redisErr(err)
				}
			}
		} else {
			k := stockKey(d.ns, mode)
			stockKeys = append(stockKeys, k)
			if err := d.rdb.Set(ctx, k, f.stock, 0).Err(); err != nil {
				return d.redisErr(err)
			}
		}
		status := func(ctx context.Context) string {
			var left int64
			for _, k := range stockKeys {
				n, _ := d.rdb.Get(ctx, k).Int64()
				left += n
			}
			return fmt.Sprintf("stock left %d", left)
		}
		run, err := d.runMode(ctx, d.spec("flashsale", mode), status)
		if err != nil {
			return d.workerErr(ctx, mode, err)
		}
		sold := run.sum(func(r demoResult) int64 { return r.Ops })
		over := max(0, sold-int64(f.stock))
		if mode != "none" && (over > 0 || sold != int64(f.stock)) {
			bad = true
		}
		d.header("%-10s %7d %9d %10s %12.0f %11s\n", mode, sold, over, fmtDur(run.elapsed),
			float64(sold)/run.elapsed.Seconds(), waitsText(mode, run.waits()))
	}
	d.header("\n")
	d.legend(modes, map[string]string{
		"none":      "no lock: handlers read the same stock and each sells from it; decrements are lost: oversold",
		"lock":      "one dlock lock on the item around read-check-write: exact",
		"segmented": fmt.Sprintf("stock split over %d keys, each with its own lock (a segmented lock, 分段锁): exact, less waiting", f.segments),
		"atomic":    "check-and-decrement in one Lua script: exact and fastest when the whole critical section fits in Redis",
	})
	d.header("lock waits: Lock calls that found the lock held and waited for it.\n")
	return d.verdict(bad)
}

func (d *demo) ids(ctx context.Context, modes []string) int {
	f := d.f
	total := f.workers * f.buyers * f.ids
	d.header("Global ids: %d worker processes × %d clients each take %d ids (%d in all)\n", f.workers, f.buyers, f.ids, total)
	d.header("by reading the last id, adding one and writing it back.\n")
	d.header("Redis: %s\n\n", d.e.where())
	d.header("%-10s %7s %11s %10s %9s %11s\n", "mode", "ids", "duplicates", "duration", "ids/s", "lock waits")
	bad := false
	for _, mode := range modes {
		if err := d.rdb.Set(ctx, idKey(d.ns, mode), 0, 0).Err(); err != nil {
			return d.redisErr(err)
		}
		run, err := d.runMode(ctx, d.spec("ids", mode), nil)
		if err != nil {
			return d.workerErr(ctx, mode, err)
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
		d.header("%-10s %7d %11d %10s %9.0f %11s\n", mode, n, dups, fmtDur(run.elapsed),
			float64(n)/run.elapsed.Seconds(), waitsText(mode, run.waits()))
	}
	d.header("\n")
	d.legend(modes, map[string]string{
		"none":   "no lock: clients read the same last id and hand out the same next one",
		"lock":   "read-increment-write under one dlock lock: no duplicates",
		"atomic": "INCR: no duplicates, fastest; what to use when the id lives in Redis",
	})
	return d.verdict(bad)
}

func (d *demo) rateLimit(ctx context.Context, modes []string) int {
	f := d.f
	total := f.workers * f.buyers * f.requests
	d.header("Rate limit: at most %d requests per IP per minute; %d worker processes × %d clients\n", f.limit, f.workers, f.buyers)
	d.header("send %d requests each (%d in all) spread over %d IPs. A request reads the IP's count, checks it is\n", f.requests, total, f.ips)
	d.header("below the limit, and writes back count+1.\n")
	d.header("Redis: %s\n\n", d.e.where())
	d.header("%-10s %9s %8s %11s %10s %7s %11s\n", "mode", "requests", "allowed", "over limit", "duration", "req/s", "lock waits")
	bad := false
	for _, mode := range modes {
		run, err := d.runMode(ctx, d.spec("ratelimit", mode), nil)
		if err != nil {
			return d.workerErr(ctx, mode, err)
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
			over += max(0, n-int64(f.limit))
		}
		reqs := run.sum(func(r demoResult) int64 { return r.Requests })
		if mode != "none" && over > 0 {
			bad = true
		}
		d.header("%-10s %9d %8d %11d %10s %7.0f %11s\n", mode, reqs, allowed, over, fmtDur(run.elapsed),
			float64(reqs)/run.elapsed.Seconds(), waitsText(mode, run.waits()))
	}
	d.header("\n")
	d.legend(modes, map[string]string{
		"none":   "no lock: concurrent requests read the same count and all pass",
		"lock":   "read-check-write of the IP's counter under a per-IP dlock lock: never over the limit",
		"atomic": "check-and-INCR in one Lua script: never over the limit, fastest",
	})
	return d.verdict(bad)
}

func (d *demo) legend(modes []string, text map[string]string) {
	for _, m := range modes {
		d.header("%-10s %s\n", m+":", text[m])
	}
}

func (d *demo) verdict(bad bool) int {
	if bad {
		d.a.errorf("demo: a locked or atomic mode was not exact: this is a bug, please report it")
		return exitNotAcquired
	}
	return exitOK
}

func (d *demo) redisErr(err error) int {
	d.a.errorf("demo: Redis at %s failed: %v", d.e.where(), err)
	return exitFailed
}

func (d *demo) workerErr(ctx context.Context, mode string, err error) int {
	if ctx.Err() != nil {
		return 130
	}
	d.a.errorf("demo: mode %s: %v", mode, err)
	return exitNotAcquired
}

func waitsText(mode string, n uint64) string {
	if mode == "none" || mode == "atomic" {
		return "-"
	}
	return strconv.FormatUint(n, 10)
}

// fmtDur formats a duration with 3 significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0fms", benchkit.MS(d))
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", benchkit.MS(d))
	}
	return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
}

// scratch returns a fresh key namespace ("dlock-<what>-<random>") for a
// demo or bench run on a Redis that may be shared, and the clean-up that
// deletes every key under it (SCAN, never KEYS or FLUSHALL).
func (a *app) scratch(rdb redis.UniversalClient, what string) (ns string, cleanup func()) {
	var rb [5]byte
	_, _ = rand.Read(rb[:])
	ns = "dlock-" + what + "-" + hex.EncodeToString(rb[:])
	return ns, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := benchkit.DeleteMatching(ctx, rdb, ns+"*"); err != nil {
			a.errorf("%s: deleting its keys (%s*): %v", what, ns, err)
		}
	}
}
