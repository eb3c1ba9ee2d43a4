package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/benchkit"
	"github.com/dlock-go/dlock/internal/demo"
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

// workerCommand is the hidden subcommand the demo's workers run as: this
// program started again, with its own connection, calling demo.Work.
const workerCommand = "__demo-worker"

func (a *app) cmdDemo(args []string) int {
	o := demo.Defaults()
	var ttl, work durationValue
	var modes string
	fs := newFlagSet("demo")
	a.globalFlags(fs)
	intFlags(fs, &o.Workers, "workers")
	intFlags(fs, &o.Buyers, "buyers")
	intFlags(fs, &o.Stock, "stock")
	intFlags(fs, &o.Customers, "customers")
	intFlags(fs, &o.Segments, "segments")
	intFlags(fs, &o.IDs, "ids")
	intFlags(fs, &o.IPs, "ips")
	intFlags(fs, &o.Limit, "limit")
	intFlags(fs, &o.Requests, "requests")
	intFlags(fs, &o.Rounds, "rounds")
	stringFlags(fs, &modes, "modes")
	durationFlags(fs, &work, "work")
	durationFlags(fs, &ttl, "ttl")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if isHelp(err) {
			return a.helpFor("demo")
		}
		return a.usageErr("demo", "demo: %v", err)
	}
	if len(pos) > 1 {
		return a.usageErr("demo", "demo: at most one scenario")
	}
	if len(pos) == 1 {
		if o.Scenario, err = demo.Scenario(pos[0]); err != nil {
			return a.usageErr("demo", "demo: %v", err)
		}
	}
	if modes != "" {
		for m := range strings.SplitSeq(modes, ",") {
			o.Modes = append(o.Modes, strings.TrimSpace(m))
		}
	}
	if work.set {
		o.Work = work.d
	}
	if ttl.set {
		if ttl.d < time.Millisecond {
			return a.usageErr("demo", "demo: --ttl must be at least 1ms")
		}
		o.TTL = ttl.d
	}
	if err := o.Check(); err != nil {
		return a.usageErr("demo", "demo: %v", err)
	}

	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	e, rdb, stopServer, code := a.connectOrStart(ctx)
	if code != exitOK {
		return code
	}
	defer stopServer()
	defer rdb.Close()
	// The demo's few small keys are not at risk of eviction: it runs on
	// such a Redis anyway, and says what that would mean for real locks.
	allowEviction := a.allowEviction
	if err := evicting(ctx, rdb); err != nil {
		a.errorf("demo: note: Redis may evict lock keys (%s); the demo runs anyway, its few keys are not at risk, but locks there need maxmemory-policy noeviction", evictingServers(err))
		allowEviction = true
	}
	ns, cleanup := a.scratch(rdb, "demo")
	defer cleanup()

	exe, err := a.sys.executable()
	if err != nil {
		a.errorf("demo: %v", err)
		return exitFailed
	}
	err = demo.Run(ctx, demo.Env{RDB: rdb, Where: e.where(), NS: ns, Stdout: a.stdout, TTY: isTerminal(a.stdout), AllowEviction: allowEviction,
		Command: func(spec string) *exec.Cmd {
			cmd := exec.Command(exe, workerCommand, "--spec", spec)
			// The URL goes in the environment, not on the command line
			// where ps would show its password.
			cmd.Env = append(os.Environ(), "DLOCK_REDIS_URL="+e.raw)
			cmd.Args = append(cmd.Args, a.tls.args()...)
			cmd.Stderr = a.stderr
			cmd.SysProcAttr = childAttr() // Linux: a worker gets SIGTERM if dlock dies
			return cmd
		}}, o)
	switch {
	case err == nil:
		return exitOK
	case ctx.Err() != nil:
		a.errorf("demo: interrupted")
		return 130
	case errors.Is(err, demo.ErrRedis):
		a.errorf("demo: %v", err)
		return exitFailed
	}
	a.errorf("demo: %v", err)
	return exitNotAcquired
}

// cmdWorker is a worker of the demo (see workerCommand). Its Redis is
// given like every command's; the demo hands it its own URL.
func (a *app) cmdWorker(args []string) int {
	var spec string
	fs := newFlagSet(workerCommand)
	a.globalFlags(fs)
	fs.StringVar(&spec, "spec", "", "")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	// The demo owns the terminal and stops its workers; a Ctrl-C must not
	// kill them before it has collected or cleaned up.
	signal.Ignore(syscall.SIGINT)
	ctx := context.Background()
	_, rdb, code := a.connect(ctx, a.target())
	if code != exitOK {
		return code
	}
	defer rdb.Close()
	err := demo.Work(ctx, rdb, spec, os.Stdin, a.stdout)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, demo.ErrAbandoned):
		return exitFailed
	case errors.Is(err, demo.ErrBadSpec):
		a.errorf("%s: %v", workerCommand, err)
		return exitUsage
	}
	a.errorf("%s: %v", workerCommand, err)
	return exitFailed
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
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
