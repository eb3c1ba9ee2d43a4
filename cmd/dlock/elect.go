package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/dlock-go/dlock/internal/defaults"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/redis/go-redis/v9"
)

const usageElect = `Usage:
  dlock elect [flags] NAME [flags] [--] COMMAND [ARG...]
  dlock elect [flags] NAME [flags] -c 'SHELL COMMAND'

Campaigns in the leader election NAME and runs COMMAND only while this
candidate is the leader: exactly one 'dlock elect NAME' of a fleet runs
COMMAND at a time, and another takes over when it dies. Candidates are
elected in the order they began to campaign. When COMMAND exits, dlock
resigns, which hands the leadership to the next candidate at once; with
--again it then campaigns again (at the back of the line).

COMMAND runs exactly as under 'dlock run' (see 'dlock help run'): in a
process group of its own, with the whole process tree held; if the
leadership is lost, or renewals fail until SIGTERM --kill-after before the
lease's deadline, the tree is stopped (SIGKILL at the deadline) and dlock
exits 124 (with --again: campaigns again); if dlock dies, the tree gets
SIGTERM at once and SIGKILL before the lease's deadline. A candidate killed
with kill -9 is replaced within --ttl.

Flags:
  --id ID                 this candidate's published value, shown by 'dlock leader'
                          and 'dlock observe'. Default: HOSTNAME:PID
  --again                 campaign again after COMMAND exits or the leadership is
                          lost, until dlock gets a signal
  --ttl DURATION          leadership lease; renewed every TTL/3. Default: 10s
  --kill-after DURATION   as for 'dlock run'. Default: TTL/3, at most 10s
  -c, --command STRING    run STRING with /bin/sh -c instead of COMMAND
  -v, --verbose           report each election and resignation on stderr
  --redis URL, --prefix P see 'dlock help'

COMMAND's environment is dlock's, plus DLOCK_KEY (NAME), DLOCK_TOKEN,
DLOCK_FENCE and DLOCK_TERM (both the term: larger for every new leader;
pass it to the resources the leader writes so a deposed leader's late
writes are refused) and DLOCK_LEADER_ID (ID).

Signals are passed on to COMMAND as by 'dlock run'; a signal ends --again
after COMMAND exits. A signal while campaigning ends dlock (128+N).

Exit codes: those of 'dlock run' (COMMAND's status; 124 leadership lost;
125 Redis failed before COMMAND ran; 126, 127; 128+N).

Examples:
  dlock elect scheduler --id "$(hostname)" --again -- ./scheduler
  dlock elect --ttl 5s migrations -- ./migrate up
`

const usageLeader = `Usage:
  dlock leader NAME [--json]

Prints the current leader of the election NAME: its published value, its
term (the fence of its leadership: larger for every new leader) and when it
was elected. Exit 0 if there is a leader, 3 if none, 4 if NAME's keys hold
values of another type.
`

const usageObserve = `Usage:
  dlock observe NAME [--json]

Prints one line for every change of leader of the election NAME and every
value a leader publishes, each once, in order (by term, then rev), until
interrupted (INT or TERM: exit 0). The first line is the current leader,
or "TIME  no leader" if nobody leads. A change whose notification was lost is printed at most --poll later
(default 1s); a leader that came and went meanwhile is still printed, and
so is each of several values published in between (the election keeps the
last 64). When nobody leads any more (the last leader resigned or its
lease ran out, and no candidate took over), it prints one line,
"TIME  no leader", within about --poll. With --json, one JSON object per
line ("leader": false for no leader). While Redis cannot be
read, one warning goes to stderr; observing resumes when it can. If NAME's
keys hold values of another type, it exits 4, as 'dlock leader' does.

Flags:
  --poll DURATION   how often to read when no notification comes. Default: 1s
`

// defaultID is a candidate's value when --id is not given.
func defaultID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return h + ":" + strconv.Itoa(os.Getpid())
}

func (a *app) cmdElect(args []string) int {
	f := runFlags{ttl: durationValue{d: defaults.TTL}, verb: "elect", conflict: 1, protocol: "token"}
	var id string
	var again bool
	fs := newFlagSet("elect")
	a.globalFlags(fs)
	stringFlags(fs, &id, "id")
	boolFlags(fs, &again, "again")
	durationFlags(fs, &f.ttl, "ttl")
	durationFlags(fs, &f.killAfter, "kill-after")
	stringFlags(fs, &f.shellCmd, "c", "command")
	boolFlags(fs, &f.verbose, "v", "verbose")
	err := fs.Parse(args)
	if err == nil {
		args, err = parseAfterKey(fs, args)
	}
	if err != nil {
		if isHelp(err) {
			return a.helpFor("elect")
		}
		return a.usageErr("elect", "elect: %v (put -- before a COMMAND that starts with '-')", err)
	}
	switch {
	case len(args) == 0:
		return a.usageErr("elect", "elect: missing NAME")
	case args[0] == "":
		return a.usageErr("elect", "elect: empty NAME")
	case f.ttl.d < time.Millisecond || f.ttl.d > dlock.MaxTTL:
		return a.usageErr("elect", "elect: --ttl %v: from 1ms to %v", f.ttl.d, dlock.MaxTTL)
	case f.killAfter.set && f.killAfter.d > f.ttl.d/2:
		return a.usageErr("elect", "elect: --kill-after %v with --ttl %v: at most TTL/2 (%v)", f.killAfter.d, f.ttl.d, f.ttl.d/2)
	case len(id) > dlock.MaxLeaderValue:
		return a.usageErr("elect", "elect: --id is %d bytes; the limit is %d", len(id), dlock.MaxLeaderValue)
	}
	name, argv := args[0], args[1:]
	if id == "" {
		id = defaultID()
	}
	if !f.killAfter.set {
		f.killAfter.d = defaultKillAfter(f.ttl.d)
	}
	argv, code := a.commandArgv("elect", "NAME", f.shellCmd, argv)
	if code != exitOK {
		return code
	}
	path, code := a.lookCommand("elect", argv[0])
	if code != exitOK {
		return code
	}

	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, handledSignals()...)
	defer signal.Stop(sigs)
	ctx := context.Background()
	var (
		e   *endpoint
		rdb redis.UniversalClient
	)
	code = a.interruptible("connecting to Redis", sigs, func(a *app) (code int) {
		e, rdb, code = a.connect(ctx, a.target())
		return code
	})
	if code != exitOK {
		return code
	}
	defer rdb.Close()
	opts := dlock.Options{TTL: f.ttl.d, AllowEviction: a.allowEviction}
	if a.prefix != "" {
		opts.Prefix = a.prefix
	}
	c, err := dlock.New(rdb, opts)
	if errors.Is(err, dlock.ErrInvalidArgument) {
		return a.usageErr("elect", "elect: --ttl %v: %s", f.ttl.d, libMsg(err))
	}
	if err != nil {
		a.errorf("elect: %s", libMsg(err))
		return exitFailed
	}
	defer c.Close()
	adm, err := adminOf(rdb, c)
	if err != nil {
		a.errorf("elect: %s", libMsg(err))
		return exitFailed
	}
	// A bad NAME is reported by the first campaign (see badKey).
	el := c.Election(name, dlock.ElectionOptions{TTL: f.ttl.d})

	for {
		l, code := a.campaign(ctx, adm, el, e, id, sigs)
		if l == nil {
			return code
		}
		term := strconv.FormatUint(l.Term(), 10)
		if f.verbose {
			a.errorf("elect: elected leader of %q (term %s, id %s)", name, term, printable(id))
		}
		f.env = []string{"DLOCK_TERM=" + term, "DLOCK_LEADER_ID=" + id}
		// Signals go to COMMAND as under 'dlock run'; one also ends --again.
		fwd, got, stop := teeSignals(sigs)
		code = a.supervise(c, l.Lock(), name, path, argv, &f, fwd)
		stop()
		if !again || got() {
			return code
		}
	}
}

// teeSignals passes the signals of in on to the returned channel and
// records whether any came; stop ends it.
func teeSignals(in <-chan os.Signal) (out chan os.Signal, got func() bool, stop func()) {
	out = make(chan os.Signal, 16)
	var mu sync.Mutex
	seen := false
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case s := <-in:
				mu.Lock()
				seen = true
				mu.Unlock()
				select {
				case out <- s:
				default:
				}
			case <-quit:
				return
			}
		}
	}()
	return out, func() bool { mu.Lock(); defer mu.Unlock(); return seen }, func() { close(quit); <-done }
}

// campaign waits to be elected, ending at once on a signal. It returns the
// leadership, or nil and the exit code (having said why).
func (a *app) campaign(ctx context.Context, adm *admin.Client, el *dlock.Election, e *endpoint, id string, sigs <-chan os.Signal) (*dlock.Leadership, int) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		l   *dlock.Leadership
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := el.Campaign(cctx, id)
		done <- result{l, err}
	}()
	var r result
	select {
	case r = <-done:
	case sig := <-sigs:
		cancel()
		r = <-done
		if r.l != nil {
			rctx, rcancel := context.WithTimeout(context.Background(), releaseTimeout)
			_ = r.l.Resign(rctx)
			rcancel()
		}
		a.errorf("elect: got %v while campaigning in %q; not running the command", sig, el.Name())
		return nil, 128 + signum(sig)
	}
	if code, bad := a.badKey(adm, "elect", el.Name(), r.err); bad {
		return nil, code
	}
	switch err := r.err; {
	case err == nil:
		return r.l, exitOK
	case errors.Is(err, dlock.ErrWrongType):
		a.errorf("elect: %s: %s; not touching it", printable(el.Name()), libMsg(err))
	case errors.Is(err, dlock.ErrNoPermission):
		a.errorf("elect: Redis at %s refused %q to this user: %s", e.where(), el.Name(), permMsg(err))
	case errors.Is(err, dlock.ErrEvictionPolicy):
		a.errorf("elect: %s; not running the command", evictionMsg(err))
	case errors.Is(err, dlock.ErrUnavailable):
		a.errorf("elect: Redis at %s failed while campaigning in %q: %v", e.where(), el.Name(), oneLine(err.Error()))
	default:
		a.errorf("elect: campaigning in %q: %v", el.Name(), err)
	}
	return nil, exitFailed
}

// leaderView is 'dlock leader --json' and a line of 'dlock observe --json'.
type leaderView struct {
	Name   string    `json:"name"`
	Leader bool      `json:"leader"`
	Value  string    `json:"value,omitempty"`
	Term   uint64    `json:"term,omitempty"`
	Rev    uint64    `json:"rev,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	AgeMS  int64     `json:"age_ms,omitempty"`
	Missed bool      `json:"missed,omitempty"`
}

func viewOfLeader(name string, li dlock.LeaderInfo) leaderView {
	if li.NoLeader {
		return leaderView{Name: name}
	}
	return leaderView{Name: name, Leader: true, Value: li.Value, Term: li.Term, Rev: li.Rev,
		Since: li.Since.UTC(), AgeMS: time.Since(li.Since).Milliseconds(), Missed: li.Missed}
}

func (a *app) cmdLeader(args []string) int {
	var asJSON bool
	fs := newFlagSet("leader")
	a.globalFlags(fs)
	boolFlags(fs, &asJSON, "json")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if isHelp(err) {
			return a.helpFor("leader")
		}
		return a.usageErr("leader", "leader: %v", err)
	}
	if len(pos) != 1 || pos[0] == "" {
		return a.usageErr("leader", "leader: want exactly one NAME")
	}
	ctx := context.Background()
	c, adm, e, done, code := a.electionClient(ctx)
	if code != exitOK {
		return code
	}
	defer done()
	el := c.Election(pos[0], dlock.ElectionOptions{})
	li, err := el.Leader(ctx)
	switch {
	case errors.Is(err, dlock.ErrNoLeader):
		if asJSON {
			a.printJSON(leaderView{Name: pos[0]})
		} else {
			fmt.Fprintf(a.stdout, "%s  no leader\n", printable(pos[0]))
		}
		return exitFree
	case err != nil:
		return a.leaderFailed(adm, e, "leader", pos[0], err)
	}
	v := viewOfLeader(pos[0], li)
	if asJSON {
		a.printJSON(v)
		return exitOK
	}
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "%s\tleader\n", printable(v.Name))
	fmt.Fprintf(w, "  value\t%s\n", printable(v.Value))
	fmt.Fprintf(w, "  term\t%d\n", v.Term)
	if v.Rev > 1 {
		fmt.Fprintf(w, "  rev\t%d (values published)\n", v.Rev)
	}
	fmt.Fprintf(w, "  since\t%s (%v ago)\n", li.Since.Local().Format("2006-01-02 15:04:05.000 MST"),
		time.Since(li.Since).Round(time.Millisecond))
	_ = w.Flush()
	return exitOK
}

func (a *app) cmdObserve(args []string) int {
	var asJSON bool
	poll := durationValue{d: time.Second}
	fs := newFlagSet("observe")
	a.globalFlags(fs)
	boolFlags(fs, &asJSON, "json")
	durationFlags(fs, &poll, "poll")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if isHelp(err) {
			return a.helpFor("observe")
		}
		return a.usageErr("observe", "observe: %v", err)
	}
	if len(pos) != 1 || pos[0] == "" {
		return a.usageErr("observe", "observe: want exactly one NAME")
	}
	if poll.d <= 0 {
		return a.usageErr("observe", "observe: --poll %v: must be positive", poll.d)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c, adm, e, done, code := a.electionClient(ctx)
	if code != exitOK {
		return code
	}
	defer done()
	// A bad NAME closes Observe's channel at once; Leader then says why.
	el := c.Election(pos[0], dlock.ElectionOptions{TTL: dlock.MaxTTL, PollInterval: poll.d})
	for li := range el.Observe(ctx) {
		a.printObserved(pos[0], li, asJSON)
	}
	if ctx.Err() != nil {
		return exitOK // interrupted
	}
	// Observe ends on its own when the election cannot be read: say why
	// as 'dlock leader' does.
	_, err = el.Leader(ctx)
	switch {
	case ctx.Err() != nil:
		return exitOK
	case err == nil, errors.Is(err, dlock.ErrNoLeader):
		err = dlock.ErrWrongType // and fixed since
	}
	return a.leaderFailed(adm, e, "observe", pos[0], err)
}

// leaderFailed reports an error reading the election name and returns
// the exit code: a bad NAME as badKey, 4 for keys of another type, else
// as redisFailed.
func (a *app) leaderFailed(adm *admin.Client, e *endpoint, cmd, name string, err error) int {
	if code, bad := a.badKey(adm, cmd, name, err); bad {
		return code
	}
	if errors.Is(err, dlock.ErrWrongType) {
		a.errorf("%s: %s: %s", cmd, printable(name), libMsg(err))
		return exitNotLock
	}
	return a.redisFailed(e, cmd, err)
}

// printObserved prints one line of 'dlock observe'.
func (a *app) printObserved(name string, li dlock.LeaderInfo, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(viewOfLeader(name, li))
		fmt.Fprintln(a.stdout, string(b))
		return
	}
	if li.NoLeader {
		fmt.Fprintf(a.stdout, "%s  no leader\n", time.Now().Format("15:04:05.000"))
		return
	}
	missed := ""
	if li.Missed {
		missed = "  (some earlier changes were missed)"
	}
	fmt.Fprintf(a.stdout, "%s  leader %s  term %d  rev %d  elected %s%s\n",
		time.Now().Format("15:04:05.000"), printable(li.Value), li.Term, li.Rev,
		li.Since.Local().Format("15:04:05.000"), missed)
}
