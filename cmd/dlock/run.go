package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"github.com/dlock-go/dlock/internal/defaults"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

const usageRun = `Usage:
  dlock run [flags] KEY [flags] [--] COMMAND [ARG...]
  dlock run [flags] KEY [flags] -c 'SHELL COMMAND'

Acquires the lock KEY (waiting until it is free, like flock), runs COMMAND
with its arguments as given (no shell unless -c), keeps the lock renewed
while it runs, and releases it when it exits. dlock's flags go before
COMMAND, before or after KEY; what follows COMMAND, or "--", is COMMAND's.

Flags:
  -n, --no-wait             fail at once if KEY is held
  -w, --wait DURATION       wait at most DURATION (5s, 500ms, or seconds: 2.5);
                            -w 0 is -n. Default: wait as long as it takes.
                            If Redis fails or stops answering meanwhile, dlock
                            exits 125, not -E
  -E, --conflict-exit-code CODE
                            exit code when the lock was not acquired. Default: 1
  --ttl DURATION            lock time-to-live; renewed every TTL/3 while COMMAND
                            runs. Default: 10s
  --kill-after DURATION     when renewals fail, COMMAND's process tree gets SIGTERM
                            this long before the lock's deadline and SIGKILL at
                            it. Default: TTL/3, at most 10s; at most TTL/2
  -c, --command STRING      run STRING with /bin/sh -c instead of COMMAND
  --protocol token|legacy   token: SET KEY <random token> NX PX (default).
                            legacy: the SETNX/GETSET timestamp lock of older C# and Python code whose value is an
                            expiry timestamp, for sharing keys with old code
  --legacy-unit s|ms        unit of the legacy timestamp. Default: s
  --metrics-addr ADDR       serve Prometheus /metrics on ADDR (host:port) while
                            dlock waits and COMMAND runs: held, waiting,
                            renewals, losses, the lock's fence and deadline
  --redlock URL,URL,...     Redlock: take the lock on a majority of these
                            independent masters (an odd number, at least 3)
                            instead of on --redis
  -s, --shared              take a shared (read) lock: any number of -s runs
                            share KEY; a plain run (the writer) excludes them all,
                            and readers arriving after a queued writer wait for it
  --limit N                 take one of N permits of the semaphore KEY: at most N
                            runs at a time
  -v, --verbose             report acquisition (wait time, fence) on stderr
  -q, --quiet               don't report a conflict (-n, -w) on stderr (errors
                            are still reported)
  --redis URL, --prefix P   see 'dlock help'

COMMAND's environment is dlock's, plus (appended last, so they win over
inherited values):
  DLOCK_KEY     the key
  DLOCK_TOKEN   the value the key holds for this lock (legacy: the first
                timestamp; it changes at each renewal)
  DLOCK_FENCE   the fencing token: larger for every grant of KEY; pass it to
                the resource you write so it can reject a stale holder
                (0 if the protocol has none)

Signals INT, TERM, HUP, QUIT, USR1 and USR2 are passed on to COMMAND. A
signal that arrives while dlock connects to Redis or waits for the lock ends
dlock at once (exit 128+N). A signal dlock was started with ignored (nohup;
INT for "cmd &" in a script) stays ignored, for COMMAND too, and is not
passed on. SIGTSTP (Ctrl-Z) stops neither dlock nor COMMAND while COMMAND
runs: a stopped dlock would renew nothing, and a stopped COMMAND would keep
the lock and the terminal.
COMMAND runs in a process group of its own (a session of its own when
dlock has no terminal; with a terminal, the terminal's foreground group, which
dlock takes back after; Ctrl-Z does not suspend COMMAND, which holds the
lock: it is resumed at once). The lock is held until every process started under
it is gone, background jobs and daemons included (Linux: dlock is a child
subreaper), as flock(1) holds while any holder of its descriptor lives.

If renewals fail (Redis unreachable), COMMAND's whole process tree gets
SIGTERM --kill-after before the lock's deadline and SIGKILL at the deadline,
so it is dead before the key can expire on the server (the deadline is the
last renewal's send time plus TTL minus the drift allowance, TTL*1% + 2ms).
If the lock is lost anyway (someone deleted or took it), the tree gets
SIGTERM at once and SIGKILL --kill-after later. Either way dlock says why on
stderr, waits until the whole tree is gone, and exits 124, never 0. If dlock
itself is killed (even SIGKILL), its process tree gets SIGTERM at once and
SIGKILL half of --kill-after before the lock's deadline; if it is stopped
(SIGSTOP) or hangs, SIGTERM half of --kill-after before the lock's last
deadline and SIGKILL at it. A guard process between dlock and COMMAND does
this; on Linux it is named dlk-guard, so that killing dlock by name
(killall -9 dlock, pkill -9 dlock) leaves it to stop the tree. Not covered:
dlock and its guard killed together (kill -9 -1; pkill -f with words of
COMMAND), a machine paused past the deadline; pass DLOCK_FENCE to the
resource.

Exit codes:
  COMMAND's status   COMMAND ran and exited
  128+N              COMMAND was killed by signal N, or dlock got signal N while
                     waiting for the lock
  1 (or -E CODE)     the lock was not acquired: held (-n), or still held when -w ran out
  2                  usage error
  124                the lock was lost while COMMAND ran, or renewals failed so long
                     that COMMAND was stopped before the deadline; its whole
                     process tree was stopped
  125                dlock failed before running COMMAND: bad URL, Redis unreachable,
                     not answering or failing (also while -w waited), KEY holds a
                     non-string value
  126                COMMAND was found but could not be executed
  127                COMMAND was not found

Examples:
  dlock run nightly-report -- ./report.sh --full
  dlock run -n -q -E 0 cron:cleanup -- ./cleanup  # skip quietly if it is running
  dlock run -w 30s --ttl 1m deploy -c 'make deploy && make smoke'
`

// forwarded are the signals dlock passes on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP,
	syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// heldCheckTimeout bounds the PING that checks Redis before dlock reports that
// a key was still held when -w ran out.
const heldCheckTimeout = 2 * time.Second

// releaseTimeout bounds the release after the command exits.
const releaseTimeout = 5 * time.Second

type runFlags struct {
	noWait, shared, verbose, quiet bool
	wait, ttl, killAfter           durationValue
	conflict, limit                int
	shellCmd, protocol, unit       string
	redlock, metricsAddr           string
	// verb names the command in supervise's messages ("run" if empty), and
	// env is added to COMMAND's environment after DLOCK_KEY, _TOKEN, _FENCE.
	verb string
	env  []string
}

func (a *app) cmdRun(args []string) int {
	f := runFlags{
		conflict: 1,
		ttl:      durationValue{d: defaults.TTL},
		protocol: "token",
		unit:     "s",
	}
	fs := newFlagSet("run")
	a.globalFlags(fs)
	boolFlags(fs, &f.noWait, "n", "no-wait", "nonblock")
	durationFlags(fs, &f.wait, "w", "wait", "timeout")
	intFlags(fs, &f.conflict, "E", "conflict-exit-code")
	durationFlags(fs, &f.ttl, "ttl")
	durationFlags(fs, &f.killAfter, "kill-after")
	stringFlags(fs, &f.shellCmd, "c", "command")
	boolFlags(fs, &f.shared, "s", "shared")
	intFlags(fs, &f.limit, "limit")
	stringFlags(fs, &f.protocol, "protocol")
	stringFlags(fs, &f.unit, "legacy-unit")
	stringFlags(fs, &f.redlock, "redlock")
	stringFlags(fs, &f.metricsAddr, "metrics-addr")
	boolFlags(fs, &f.verbose, "v", "verbose")
	boolFlags(fs, &f.quiet, "q", "quiet")
	if err := fs.Parse(args); err != nil {
		if isHelp(err) {
			return a.helpFor("run")
		}
		return a.usageErr("run", "run: %v", err)
	}
	args, err := parseAfterKey(fs, args)
	if err != nil {
		if isHelp(err) {
			return a.helpFor("run")
		}
		return a.usageErr("run", "run: %v (after KEY, dlock's flags come before COMMAND; put -- before a COMMAND that starts with '-')", err)
	}

	// Validate everything before touching Redis.
	switch {
	case f.shared && f.limit != 0:
		return a.usageErr("run", "run: -s and --limit exclude each other")
	case f.limit < 0 || f.limit == 0 && flagGiven(fs, "limit"):
		return a.usageErr("run", "run: --limit %d: a semaphore has at least 1 permit", f.limit)
	case (f.shared || f.limit != 0) && (f.protocol != "token" || f.redlock != ""):
		return a.usageErr("run", "run: -s and --limit work with the token protocol on --redis only")
	case f.noWait && f.wait.set && f.wait.d > 0:
		return a.usageErr("run", "run: -n and -w exclude each other")
	case f.conflict < 0 || f.conflict > 255:
		return a.usageErr("run", "run: -E %d: an exit code is 0..255", f.conflict)
	case f.ttl.d < time.Millisecond:
		return a.usageErr("run", "run: --ttl %v: at least 1ms", f.ttl.d)
	case f.ttl.d > dlock.MaxTTL:
		return a.usageErr("run", "run: --ttl %v: at most %v", f.ttl.d, dlock.MaxTTL)
	case f.killAfter.set && f.killAfter.d > f.ttl.d/2:
		return a.usageErr("run", "run: --kill-after %v with --ttl %v: at most TTL/2 (%v): COMMAND gets SIGTERM "+
			"that long before the lock's deadline when renewals fail, and a longer time would stop it between "+
			"ordinary renewals (every TTL/3)", f.killAfter.d, f.ttl.d, f.ttl.d/2)
	case len(args) == 0:
		return a.usageErr("run", "run: missing KEY")
	case args[0] == "":
		return a.usageErr("run", "run: empty KEY")
	}
	key, argv := args[0], args[1:] // the flag parser took a "--" after KEY
	if !f.killAfter.set {
		f.killAfter.d = defaultKillAfter(f.ttl.d)
	}
	argv, code := a.commandArgv("run", "KEY", f.shellCmd, argv)
	if code != exitOK {
		return code
	}
	lockOpts := []dlock.LockOption{dlock.WithTTL(f.ttl.d)}
	switch f.protocol {
	case "token":
	case "legacy":
		opt, err := legacyProtocol(f.unit)
		if err != nil {
			return a.usageErr("run", "run: %v", err)
		}
		lockOpts = append(lockOpts, opt)
	default:
		return a.usageErr("run", "run: --protocol %q: want token or legacy", f.protocol)
	}
	if f.redlock != "" && f.protocol != "token" {
		return a.usageErr("run", "run: --redlock takes the token protocol only")
	}

	// Find the command before taking the lock: a typo should not cost a
	// lock round trip, nor hold the lock for nothing.
	path, code := a.lookCommand("run", argv[0])
	if code != exitOK {
		return code
	}

	// Signals: from now on they are ours. While waiting they end the wait;
	// while the command runs they are forwarded to it.
	// A signal dlock was started with ignored (nohup, `cmd &` in a script)
	// stays ignored: COMMAND inherits that, and dlock does not forward it.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, handledSignals()...)
	defer signal.Stop(sigs)

	ctx := context.Background()
	opts := dlock.Options{TTL: f.ttl.d, AllowEviction: a.allowEviction}
	if a.prefix != "" {
		opts.Prefix = a.prefix
	}
	var client *dlock.Client
	var e *endpoint
	var probe func(context.Context) error
	var adm *admin.Client // explains a key that is no lock
	if f.redlock != "" {
		var (
			c          *dlock.Client
			p          protocol.Protocol
			closeNodes func()
		)
		code := a.interruptible("connecting to the Redlock nodes", sigs, func(a *app) (code int) {
			c, p, adm, closeNodes, code = a.redlockClient(ctx, f.redlock, opts)
			return code
		})
		if code != exitOK {
			return code
		}
		defer closeNodes()
		client, e = c, &endpoint{display: redactURLs(f.redlock), kind: "redlock", source: "--redlock"}
		lockOpts = append(lockOpts, dlock.WithProtocol(p))
	} else {
		var rdb redis.UniversalClient
		code := a.interruptible("connecting to Redis", sigs, func(a *app) (code int) {
			e, rdb, code = a.connect(ctx, a.target())
			return code
		})
		if code != exitOK {
			return code
		}
		defer rdb.Close()
		probe = func(ctx context.Context) error { return ping(ctx, rdb) }
		c, err := dlock.New(rdb, opts)
		if errors.Is(err, dlock.ErrInvalidArgument) {
			return a.usageErr("run", "run: --ttl %v: %s", f.ttl.d, libMsg(err))
		}
		if err != nil {
			a.errorf("run: %s", libMsg(err))
			return exitFailed
		}
		client = c
		if adm, err = adminOf(rdb, c); err != nil {
			a.errorf("run: %s", libMsg(err))
			return exitFailed
		}
	}
	defer client.Close()
	var metrics *metricsServer
	if f.metricsAddr != "" {
		m, err := startMetrics(f.metricsAddr, client)
		if err != nil {
			a.errorf("run: --metrics-addr %s: %v", f.metricsAddr, err)
			return exitFailed
		}
		defer m.stop()
		metrics = m
	}

	lk, code := a.acquire(ctx, client, adm, e, key, &f, lockOpts, sigs, probe)
	if lk == nil {
		return code
	}
	if metrics != nil {
		metrics.lock.Store(lk)
	}
	return a.supervise(client, lk, key, path, argv, &f, sigs)
}

// parseAfterKey finishes parsing "[flags] KEY [flags] [--] COMMAND..." after
// fs.Parse(args) stopped at KEY: flags may follow KEY too (`dlock run -w 30s
// deploy -c '...'`); they are dlock's up to COMMAND or "--", and everything
// after COMMAND is COMMAND's. It returns KEY and COMMAND's words.
func parseAfterKey(fs *flag.FlagSet, args []string) ([]string, error) {
	endedByDashes := len(fs.Args()) < len(args) && args[len(args)-len(fs.Args())-1] == "--"
	args = fs.Args()
	if len(args) == 0 || endedByDashes {
		return args, nil
	}
	key := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	return append([]string{key}, fs.Args()...), nil
}

// handledSignals are the forwarded signals that dlock was not started with
// ignored.
func handledSignals() []os.Signal {
	var out []os.Signal
	for _, s := range forwarded {
		if !signal.Ignored(s) {
			out = append(out, s)
		}
	}
	return out
}

// defaultKillAfter is --kill-after's default: 10s, or TTL/3 for a TTL under 30s,
// so that SIGTERM comes well after an ordinary renewal was due.
func defaultKillAfter(ttl time.Duration) time.Duration {
	return min(10*time.Second, ttl/3)
}

// interruptible runs f, which may block on Redis for seconds (a PING to a
// server that does not answer), and returns its exit code, or 128+N at once
// if signal N arrives first: Ctrl-C while connecting ends dlock promptly.
// f's messages are printed only if it finishes first.
func (a *app) interruptible(what string, sigs <-chan os.Signal, f func(a *app) int) int {
	var buf bytes.Buffer
	sub := *a
	sub.stderr = &buf
	done := make(chan int, 1)
	go func() { done <- f(&sub) }()
	select {
	case code := <-done:
		_, _ = a.stderr.Write(buf.Bytes())
		return code
	case sig := <-sigs:
		a.errorf("run: got %v while %s; not running the command", sig, what)
		return 128 + signum(sig)
	}
}

// lookCommand resolves argv0 like a shell would: 127 if it is not found,
// 126 if it is not executable.
func (a *app) lookCommand(verb, argv0 string) (string, int) {
	path, err := exec.LookPath(argv0)
	if err == nil {
		return path, exitOK
	}
	if errors.Is(err, exec.ErrDot) {
		return path, exitOK // found through "." in $PATH: a shell would run it too
	}
	switch {
	case errors.Is(err, fs.ErrPermission):
		a.errorf("%s: %s: permission denied (not executable)", verb, argv0)
		return "", exitNoExec
	case strings.Contains(argv0, "/") && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, exec.ErrNotFound):
		a.errorf("%s: %s: %v", verb, argv0, unwrapExec(err))
		return "", exitNoExec
	}
	a.errorf("%s: %s: command not found", verb, argv0)
	return "", exitNotFound
}

func unwrapExec(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}

// lockAs takes key as the flags say: a read lock (--shared), a permit of
// a semaphore (--limit), or else the exclusive lock; with try, in one
// attempt.
func lockAs(ctx context.Context, c *dlock.Client, key string, f *runFlags, try bool, opts []dlock.LockOption) (*dlock.Lock, error) {
	switch {
	case f.shared && try:
		return c.RWLock(key).TryRLock(ctx, opts...)
	case f.shared:
		return c.RWLock(key).RLock(ctx, opts...)
	case f.limit > 0 && try:
		return c.Semaphore(key, f.limit).TryAcquire(ctx, 1, opts...)
	case f.limit > 0:
		return c.Semaphore(key, f.limit).Acquire(ctx, 1, opts...)
	case try:
		return c.TryLock(ctx, key, opts...)
	}
	return c.Lock(ctx, key, opts...)
}

// acquire takes the lock as the flags say. It returns the lock, or nil and
// the exit code (having printed why).
// probe, if not nil, checks that Redis answers.
func (a *app) acquire(ctx context.Context, c *dlock.Client, adm *admin.Client, e *endpoint, key string, f *runFlags,
	opts []dlock.LockOption, sigs <-chan os.Signal, probe func(context.Context) error) (*dlock.Lock, int) {
	try := f.noWait || (f.wait.set && f.wait.d == 0)
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !try && f.wait.set {
		actx, cancel = context.WithTimeout(actx, f.wait.d)
		defer cancel()
	}
	type result struct {
		lk  *dlock.Lock
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		var r result
		r.lk, r.err = lockAs(actx, c, key, f, try, opts)
		done <- r
	}()
	var r result
	select {
	case r = <-done:
	case sig := <-sigs:
		cancel()
		r = <-done
		if r.lk != nil {
			rctx, rcancel := context.WithTimeout(context.Background(), releaseTimeout)
			_ = r.lk.Unlock(rctx)
			rcancel()
		}
		a.errorf("run: got %v while waiting for %q; not running the command", sig, key)
		return nil, 128 + signum(sig)
	}
	if r.err == nil {
		if f.verbose {
			a.errorf("run: acquired %q after %v (fence %d, ttl %v)", key, time.Since(start).Round(time.Millisecond), r.lk.Fence(), f.ttl.d)
		}
		return r.lk, exitOK
	}
	err := r.err
	var na *dlock.NotAcquiredError
	switch {
	case errors.As(err, &na):
		if !f.quiet {
			a.errorf("run: %q is held by another owner (%s); not running the command", key, holderTTL(na.TTL))
		}
		return nil, f.conflict
	case errors.Is(err, dlock.ErrNoPermission):
		a.errorf("run: Redis at %s refused %q to this user: %s", e.where(), key, permMsg(err))
		return nil, exitFailed
	case errors.Is(err, dlock.ErrContextDone) && errors.Is(err, context.DeadlineExceeded):
		// -w ran out. That the key is still held is true only if Redis
		// answered: the wait's error says whether its last attempt got an
		// error or no reply, and a PING checks (a waiting call may have
		// been asleep when Redis stopped answering; a reply cut short by
		// the deadline is no outage).
		if errors.Is(err, dlock.ErrUnavailable) && !errors.Is(err, dlock.ErrNoReply) {
			a.errorf("run: Redis at %s failed while dlock waited for %q (%s); not running the command", e.where(), key, libMsg(err))
			return nil, exitFailed
		}
		silent := errors.Is(err, dlock.ErrNoReply)
		if probe != nil {
			pctx, cancel := context.WithTimeout(context.Background(), heldCheckTimeout)
			perr := probe(pctx)
			cancel()
			switch {
			case perr == nil:
				silent = false
			case isTimeout(perr):
				a.errorf("run: Redis at %s did not answer while dlock waited for %q (no reply to PING within %v); not running the command", e.where(), key, heldCheckTimeout)
				return nil, exitFailed
			default:
				a.errorf("run: Redis at %s failed while dlock waited for %q (%s); not running the command", e.where(), key, oneLine(perr.Error()))
				return nil, exitFailed
			}
		}
		if silent {
			a.errorf("run: Redis at %s did not answer while dlock waited for %q (%s); not running the command", e.where(), key, libMsg(err))
			return nil, exitFailed
		}
		if !f.quiet {
			a.errorf("run: %q still held after waiting %v; not running the command", key, f.wait.d)
		}
		return nil, f.conflict
	case errors.Is(err, dlock.ErrUnavailable):
		a.errorf("run: Redis at %s failed while acquiring %q: %v", e.where(), key, oneLine(err.Error()))
		return nil, exitFailed
	case errors.Is(err, dlock.ErrWrongType):
		// A non-string value, or (legacy) a value that is not a timestamp.
		what := notALock(ctx, adm, key, f.limit > 0)
		if strings.HasSuffix(what, "(it holds a non-string value)") {
			what = printable(key) + ": " + libMsg(err)
		}
		a.errorf("run: %s; not touching it", what)
		return nil, exitFailed
	case errors.Is(err, dlock.ErrEvictionPolicy):
		a.errorf("run: %s; not running the command", evictionMsg(err))
		return nil, exitFailed
	case errors.Is(err, dlock.ErrInvalidArgument):
		return nil, a.usageErr("run", "run: %s", libMsg(err))
	}
	a.errorf("run: acquiring %q: %v", key, err)
	return nil, exitFailed
}

func holderTTL(d time.Duration) string {
	if d < 0 {
		return "no expiry set by its holder"
	}
	return "expires in " + d.Round(time.Millisecond).String()
}

// supervise runs the command while lk is held and returns dlock's exit code.
//
// The command runs under a guard (see guardCommand) that keeps its whole
// process tree together. The lock is released only after that tree is gone.
// If renewals fail, the tree gets SIGTERM at the lock's deadline minus
// --kill-after and SIGKILL at the deadline, so that it is dead before the
// key can expire on the server (the deadline is the send time of the last
// renewal plus TTL, minus the drift allowance).
func (a *app) supervise(c *dlock.Client, lk *dlock.Lock, key, path string, argv []string, f *runFlags, sigs <-chan os.Signal) int {
	// Appended after the inherited environment: for duplicate names the
	// last value wins, so a nested `dlock run` sees its own key.
	env := dedupEnv(append(append(os.Environ(),
		"DLOCK_KEY="+key,
		"DLOCK_TOKEN="+lk.Token(),
		"DLOCK_FENCE="+strconv.FormatUint(lk.Fence(), 10)), f.env...))
	verb := f.verb
	if verb == "" {
		verb = "run"
	}
	say := func(format string, args ...any) { a.errorf(verb+": "+format, args...) }
	release := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		return lk.Unlock(ctx)
	}
	// SIGTSTP would stop dlock, not COMMAND's tree, which is in groups of
	// its own: `fg` then Ctrl-Z on a dlock started with '&', or a `kill
	// -TSTP`, would leave the command running while nobody renewed the
	// lock. dlock catches it and goes on (COMMAND gets the default action
	// back at exec). One dlock was started with ignored stays ignored.
	tstp := make(chan os.Signal, 1)
	if !signal.Ignored(syscall.SIGTSTP) {
		signal.Notify(tstp, syscall.SIGTSTP)
		defer signal.Stop(tstp)
	}
	becomeSubreaper() // should the guard die, its orphans come to dlock
	g, err := startGuard(verb, path, argv, env)
	if err != nil {
		_ = release()
		say("%s: cannot start: %v", argv[0], err)
		return exitNoExec
	}
	mode := terminalMode()
	exited := make(chan syscall.WaitStatus, 1)
	go func() {
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(g.proc.Pid, &ws, 0, nil)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		exited <- ws
	}()

	killAfter := f.killAfter.d
	var (
		lost     error
		lostCh   = lk.Done()
		stopping bool      // SIGTERM sent: the tree is being stopped
		killAt   time.Time // when SIGKILL follows
		killWhen string    // killAt in words, for the message
		killed   bool
		ws       syscall.WaitStatus
	)
	// One timer: SIGTERM when the deadline comes within killAfter, then
	// SIGKILL at killAt. A renewal moves the deadline, so it is read again
	// each time the timer fires.
	timer := time.NewTimer(time.Until(lk.Deadline().Add(-killAfter)))
	defer timer.Stop()
	// The guard stops the tree by the last deadline dlock gave it, should
	// dlock stop giving them while it lives (SIGSTOP, a hang): SIGTERM half
	// of killAfter before it and SIGKILL at it. A new deadline reaches the
	// guard within a tick of killAfter/4 (5ms..250ms), so that its SIGTERM
	// stays later than the one dlock sends itself when renewals fail.
	var told time.Time
	tell := func() {
		if dl := lk.Deadline(); !dl.IsZero() && !dl.Equal(told) {
			told = dl
			g.deadline(dl.Add(-killAfter/2), dl)
		}
	}
	tell()
	tick := time.NewTicker(min(max(killAfter/4, 5*time.Millisecond), 250*time.Millisecond))
	defer tick.Stop()
	stop := func(at time.Time, when string) {
		stopping, killAt, killWhen = true, at, when
		g.deadline(at, at) // the guard's SIGKILL, should dlock not send it
		g.term()
		timer.Reset(time.Until(killAt))
	}
loop:
	for {
		select {
		case sig := <-sigs:
			g.signal(sig)
		case <-tick.C:
			tell()
		case <-tstp:
			say("got SIGTSTP: not stopping, as %s runs on under the lock %q and only dlock renews it (SIGINT or SIGTERM stop %s)",
				argv[0], key, argv[0])
		case <-timer.C:
			now := time.Now()
			switch {
			case killed:
			case stopping && !now.Before(killAt):
				killed = true
				say("%s is still running %s; sending SIGKILL to its process tree", argv[0], killWhen)
				g.kill()
			case stopping:
				timer.Reset(time.Until(killAt))
			case lk.Err() != nil:
				// Lost: handled on lostCh.
			default:
				dl := lk.Deadline()
				if now.Before(dl.Add(-killAfter)) {
					timer.Reset(time.Until(dl.Add(-killAfter)))
					continue
				}
				say("renewals of %q are failing and its deadline is %v away: sending SIGTERM to the process tree of %s (SIGKILL at the deadline), so that it stops before the lock can expire",
					key, time.Until(dl).Round(time.Millisecond), argv[0])
				stop(dl, "at the lock's deadline")
			}
		case <-lostCh:
			lostCh = nil
			lost = lk.Err()
			if lost == nil || errors.Is(lost, dlock.ErrReleased) {
				lost = nil // cannot happen: we have not released
				continue
			}
			if stopping {
				say("lost the lock %q while %s was running: %s", key, argv[0], lossReason(lost))
				if !killed && !time.Now().Before(killAt) {
					killed = true
					g.kill()
				}
				continue
			}
			say("lost the lock %q while %s was running: %s; sending SIGTERM to its process tree (SIGKILL in %v)",
				key, argv[0], lossReason(lost), killAfter)
			stop(time.Now().Add(killAfter), killAfter.String()+" after SIGTERM")
		case ws = <-exited:
			break loop
		}
	}
	_ = g.ctl.Close()
	// Normally the guard leaves nothing behind. If it was killed, its
	// orphans are dlock's children now (dlock is a subreaper too).
	if left := descendants(os.Getpid()); len(left) > 0 {
		killLeftovers()
	}
	if mode == modeForeground {
		reclaimTerminal()
	}
	code := exitStatusOf(ws)
	if ws.Signaled() {
		say("the process that supervises %s was %s; its processes were killed", argv[0], childStatus(ws))
	}
	if lost == nil && stopping {
		say("%s was stopped because renewals of %q were failing", argv[0], key)
	}
	if lost != nil || stopping {
		_ = release()
		return exitLost
	}
	switch err := release(); {
	case err == nil:
	case errors.Is(err, dlock.ErrLost):
		say("the lock %q was lost before %s exited (%s): it ran unprotected for a while", key, argv[0], lossReason(err))
		return exitLost
	default:
		say("could not release %q (%v); it expires by itself within %v", key, err, f.ttl.d)
	}
	if f.verbose {
		say("released %q; %s exited with %d", key, argv[0], code)
	}
	return code
}

// dedupEnv keeps the last value of each variable in env, in place of the
// first: a later entry wins, as with os/exec.
func dedupEnv(env []string) []string {
	last := map[string]int{}
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		last[name] = i
	}
	out := make([]string, 0, len(last))
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if last[name] == i {
			out = append(out, kv)
		}
	}
	return out
}

// killLeftovers SIGKILLs every descendant of dlock and waits for them.
func killLeftovers() {
	self := os.Getpid()
	done := make(chan struct{})
	go func() {
		reapAll(-1, nil)
		close(done)
	}()
	for {
		for _, pid := range descendants(self) {
			signalDescendant(self, pid, syscall.SIGKILL)
		}
		select {
		case <-done:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lossReason explains a loss error in words, on one line, with one cause.
func lossReason(err error) string {
	switch {
	case errors.Is(err, dlock.ErrTaken):
		return "another owner holds it now"
	case errors.Is(err, dlock.ErrUnreachable):
		if d := lossDetail(err); d != "" {
			return "Redis could not be reached to renew it before its deadline (" + d + ")"
		}
		return "Redis could not be reached to renew it before its deadline"
	case errors.Is(err, dlock.ErrExpired):
		return "the key was deleted, or its TTL ran out before a renewal was confirmed"
	}
	return oneLine(err.Error())
}

// lossDetail is what went wrong under a loss error, without the loss
// sentinels that lossReason already puts in words: the Redis error of the
// last renewal, say. Joined causes are separated by "; ".
func lossDetail(err error) string {
	var parts []string
	var walk func(error)
	walk = func(e error) {
		switch {
		case e == nil:
		case e == dlock.ErrLost || e == dlock.ErrUnreachable || e == dlock.ErrExpired ||
			e == dlock.ErrTaken || e == dlock.ErrUnavailable:
		default:
			if j, ok := e.(interface{ Unwrap() []error }); ok {
				for _, c := range j.Unwrap() {
					walk(c)
				}
				return
			}
			if errors.Is(e, dlock.ErrLost) || errors.Is(e, dlock.ErrUnavailable) {
				// A wrapper around a sentinel and the cause: keep the cause.
				if inner := errors.Unwrap(e); inner != nil {
					walk(inner)
					return
				}
			}
			parts = append(parts, oneLine(e.Error()))
		}
	}
	walk(err)
	return strings.Join(parts, "; ")
}

// oneLine joins the lines of s with "; ".
func oneLine(s string) string {
	var lines []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}

// isNetTimeout reports whether err is, or wraps, a network timeout.
func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func signum(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 1
}

// commandArgv is the command cmd runs: argv as given after after (KEY or
// NAME), or -c STRING through /bin/sh; exactly one of the two.
func (a *app) commandArgv(cmd, after, shellCmd string, argv []string) ([]string, int) {
	switch {
	case shellCmd != "" && len(argv) > 0:
		return nil, a.usageErr(cmd, "%s: give either -c STRING or COMMAND, not both", cmd)
	case shellCmd != "":
		return []string{"/bin/sh", "-c", shellCmd}, exitOK
	case len(argv) == 0:
		return nil, a.usageErr(cmd, "%s: missing COMMAND after %s (or use -c STRING)", cmd, after)
	}
	return argv, exitOK
}
