package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// `dlock demo election`: worker processes campaign in one election; the
// demo kills the leader (kill -9), pauses the next (SIGSTOP past its TTL)
// and makes the next resign, and shows how long each takeover took and
// that no two leaders acted in one term. Every leader increments a fenced
// counter while it leads: a script that refuses a term older than the
// newest it has seen and records which worker wrote in each term.

// electionWorkerCommand is the hidden subcommand election workers run as.
const electionWorkerCommand = "__election-worker"

// electionSpec tells an election worker what to do (JSON on its command line).
type electionSpec struct {
	NS   string        `json:"ns"` // dlock prefix and key namespace
	ID   string        `json:"id"`
	TTL  time.Duration `json:"ttl"`
	Act  time.Duration `json:"act"` // how often a leader writes
	Name string        `json:"name"`
}

func electionName(ns string) string    { return ns + ":leader" }
func electionCounter(ns string) string { return ns + ":counter" }
func electionWriters(ns string) string { return ns + ":writers" }

// fencedCounterScript is the protected resource: it increments the count
// only for a term at least the newest it has seen, and records the writer
// of each term (a second writer in one term is counted as a conflict).
//
// KEYS[1] hash {term, n, refused, conflicts}; KEYS[2] hash term -> writer
// ARGV[1] term; ARGV[2] writer
// Returns 1 written, 0 refused (an older term).
var fencedCounterScript = redis.NewScript(`
local term = tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', KEYS[1], 'term') or '0')
if term < cur then
  redis.call('HINCRBY', KEYS[1], 'refused', 1)
  return 0
end
redis.call('HSET', KEYS[1], 'term', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'n', 1)
local who = redis.call('HGET', KEYS[2], ARGV[1])
if who and who ~= ARGV[2] then
  redis.call('HINCRBY', KEYS[1], 'conflicts', 1)
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1`)

// cmdElectionWorker campaigns, and while leading writes to the fenced
// counter every spec.Act, checking its leadership first. Events on stdout,
// one per line: "leading <term>", "lost <term>", "resigned <term>",
// "refused <term>" (a write the counter refused). "resign" on stdin
// resigns; the worker then campaigns again, as it does after a loss.
func (a *app) cmdElectionWorker(args []string) int {
	var specJSON string
	fs := newFlagSet(electionWorkerCommand)
	fs.StringVar(&specJSON, "spec", "", "")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	var spec electionSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil || spec.TTL <= 0 || spec.Act <= 0 {
		a.errorf("%s: bad --spec", electionWorkerCommand)
		return exitUsage
	}
	ctx := context.Background()
	_, rdb, code := a.connect(ctx, a.target())
	if code != exitOK {
		return code
	}
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.Options{Prefix: spec.NS, TTL: spec.TTL})
	if err != nil {
		a.errorf("%s: %v", electionWorkerCommand, err)
		return exitFailed
	}
	defer c.Close()
	el, err := c.Election(spec.Name, dlock.ElectionOptions{TTL: spec.TTL})
	if err != nil {
		a.errorf("%s: %v", electionWorkerCommand, err)
		return exitFailed
	}
	resign := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "resign" {
				select {
				case resign <- struct{}{}:
				default:
				}
			}
		}
		os.Exit(0) // the demo went away
	}()
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(a.stdout, format+"\n", args...)
	}
	say("ready")
	for {
		l, err := el.Campaign(ctx, spec.ID)
		if err != nil {
			say("error %s", oneLine(a.redact.clean(err.Error())))
			return exitFailed
		}
		select { // a resign sent before this term does not end it
		case <-resign:
		default:
		}
		term := l.Term()
		say("leading %d", term)
		t := time.NewTicker(spec.Act)
	lead:
		for {
			select {
			case <-resign:
				_ = l.Resign(ctx)
				say("resigned %d", term)
				break lead
			case <-t.C:
			}
			// Check the leadership before every act: a leader paused past
			// its lease finds the loss here when it resumes.
			if l.Err() != nil {
				say("lost %d", term)
				break lead
			}
			ok, err := fencedCounterScript.Run(ctx, rdb, []string{electionCounter(spec.NS), electionWriters(spec.NS)},
				term, spec.ID).Int()
			if err == nil && ok == 0 {
				say("refused %d", term)
			}
		}
		t.Stop()
	}
}

// electionWorker is a running election worker, seen from the demo.
type electionWorker struct {
	id    string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

type electionEvent struct {
	w    *electionWorker
	kind string // ready, leading, lost, resigned, refused, error, exit
	term uint64
	at   time.Time
	text string
}

// electionDemo runs `dlock demo election`.
type electionDemo struct {
	*demo
	c       *dlock.Client
	spec    electionSpec
	exe     string
	next    int
	workers []*electionWorker
	events  chan electionEvent
	leader  *electionWorker
	term    uint64
	seen    []electionEvent // every event received
	pending []electionEvent // leading, lost and ready events not awaited yet
}

func (d *demo) election(ctx context.Context) int {
	f := d.f
	exe, err := os.Executable()
	if err != nil {
		d.a.errorf("demo: %v", err)
		return exitFailed
	}
	c, err := dlock.New(d.rdb, dlock.Options{Prefix: d.ns})
	if err != nil {
		d.a.errorf("demo: %v", err)
		return exitFailed
	}
	defer c.Close()
	ed := &electionDemo{demo: d, c: c, exe: exe, events: make(chan electionEvent, 1024),
		spec: electionSpec{NS: d.ns, TTL: f.ttl.d, Act: 10 * time.Millisecond, Name: electionName(d.ns)}}
	defer ed.stopAll()
	if code := ed.run(ctx); code != exitOK {
		if ctx.Err() != nil {
			return 130
		}
		return code
	}
	return exitOK
}

func (ed *electionDemo) run(ctx context.Context) int {
	f := ed.f
	ed.header("Leader election: %d worker processes campaign in one election (TTL %v). While it leads, a\n", f.workers, f.ttl.d)
	ed.header("worker checks its leadership, then increments a fenced counter with its term every %v; the\n", ed.spec.Act)
	ed.header("counter refuses a term older than the newest it has seen and records who wrote in each term.\n")
	ed.header("Redis: %s\n\n", ed.e.where())
	for range f.workers {
		if err := ed.start(); err != nil {
			return ed.fail(err)
		}
	}
	for range f.workers {
		if _, err := ed.await(ctx, "ready", nil, time.Minute); err != nil {
			return ed.fail(err)
		}
	}
	ev, err := ed.await(ctx, "leading", nil, time.Minute)
	if err != nil {
		return ed.fail(err)
	}
	ed.leader, ed.term = ev.w, ev.term
	ed.header("%-28s %-10s %-18s %s\n", "event", "new leader", "term", "takeover")
	ed.header("%-28s %-10s %-18d %s\n", "first election", ev.w.id, ev.term, "-")
	takeovers := map[string][]time.Duration{}
	for round := 0; round < f.rounds; round++ {
		for _, kind := range []string{"kill", "pause", "resign"} {
			d, err := ed.takeover(ctx, kind)
			if err != nil {
				return ed.fail(err)
			}
			takeovers[kind] = append(takeovers[kind], d)
		}
	}
	time.Sleep(3 * ed.spec.Act) // the last leader writes a little
	res, err := ed.rdb.HGetAll(ctx, electionCounter(ed.ns)).Result()
	if err != nil {
		return ed.redisErr(err)
	}
	writers, err := ed.rdb.HLen(ctx, electionWriters(ed.ns)).Result()
	if err != nil {
		return ed.redisErr(err)
	}
	conflicts, _ := strconv.Atoi(res["conflicts"])
	refused, _ := strconv.Atoi(res["refused"])
	ed.header("\nfenced counter: %s writes in %d terms; %d refused (a deposed leader's term); terms with two writers: %d\n",
		res["n"], writers, refused, conflicts)
	ed.header("takeover (median of %d): after kill -9 %s, after SIGSTOP %s (both bounded by the TTL, %v), after resign %s\n",
		f.rounds, fmtDur(median(takeovers["kill"])), fmtDur(median(takeovers["pause"])), f.ttl.d, fmtDur(median(takeovers["resign"])))
	ed.header("\nkill -9:  the leader dies without a word; its lease runs out and the next candidate in line leads.\n")
	ed.header("SIGSTOP:  the leader is paused past its lease; the next leads; on resume the paused worker finds\n")
	ed.header("          its leadership lost (Err) before acting, and a write already under way is refused by term.\n")
	ed.header("resign:   the lock is handed to the next candidate at once.\n")
	return ed.verdict(conflicts > 0)
}

// takeover makes the leader go (kind: kill, pause, resign), waits for the
// next leader and prints the row. It returns the takeover time.
func (ed *electionDemo) takeover(ctx context.Context, kind string) (time.Duration, error) {
	// Every other candidate queued, so one is in line.
	q := ed.c.KeysFor(ed.spec.Name).Queue
	want := int64(len(ed.workers) - 1)
	for deadline := time.Now().Add(time.Minute); ed.rdb.LLen(ctx, q).Val() < want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, errors.New("the candidates did not queue within a minute")
		}
	}
	time.Sleep(5 * ed.spec.Act) // the leader writes a little
	old, oldTerm := ed.leader, ed.term
	var label string
	start := time.Now()
	switch kind {
	case "kill":
		label = "kill -9 " + old.id
		_ = old.cmd.Process.Kill()
	case "pause":
		label = "SIGSTOP " + old.id
		_ = old.cmd.Process.Signal(syscall.SIGSTOP)
	case "resign":
		label = "resign " + old.id
		_, _ = io.WriteString(old.stdin, "resign\n")
	}
	ev, err := ed.await(ctx, "leading", func(e electionEvent) bool { return e.w != old }, time.Minute+2*ed.f.ttl.d)
	if err != nil {
		return 0, err
	}
	took := ev.at.Sub(start)
	if ev.term <= oldTerm {
		return 0, fmt.Errorf("%s leads with term %d, not above %d", ev.w.id, ev.term, oldTerm)
	}
	ed.leader, ed.term = ev.w, ev.term
	note := ""
	switch kind {
	case "kill":
		_ = old.cmd.Wait()
		ed.drop(old)
		if err := ed.start(); err != nil { // a replacement joins the line
			return 0, err
		}
		if _, err := ed.await(ctx, "ready", nil, time.Minute); err != nil {
			return 0, err
		}
	case "pause":
		time.Sleep(5 * ed.spec.Act) // the new leader writes a little
		_ = old.cmd.Process.Signal(syscall.SIGCONT)
		before := ed.refusedOf(old)
		if _, err := ed.await(ctx, "lost", func(e electionEvent) bool { return e.w == old }, time.Minute); err != nil {
			return 0, err
		}
		note = fmt.Sprintf("  %s resumed: found the loss before acting", old.id)
		if n := ed.refusedOf(old) - before; n > 0 {
			note = fmt.Sprintf("  %s resumed: %d write already under way refused, then found the loss", old.id, n)
		}
	}
	ed.header("%-28s %-10s %-18d %s%s\n", label, ev.w.id, ev.term, fmtDur(took), note)
	return took, nil
}

// refusedOf counts the refused writes w reported so far.
func (ed *electionDemo) refusedOf(w *electionWorker) int {
	ed.drain()
	n := 0
	for _, e := range ed.seen {
		if e.w == w && e.kind == "refused" {
			n++
		}
	}
	return n
}

// start starts one more worker.
func (ed *electionDemo) start() error {
	ed.next++
	spec := ed.spec
	spec.ID = "worker-" + strconv.Itoa(ed.next)
	specJSON, _ := json.Marshal(spec)
	cmd := exec.Command(ed.exe, electionWorkerCommand, "--spec", string(specJSON))
	cmd.Env = append(os.Environ(), "DLOCK_REDIS_URL="+ed.url)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = childAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting a worker (%s): %w", ed.exe, err)
	}
	w := &electionWorker{id: spec.ID, cmd: cmd, stdin: stdin}
	ed.workers = append(ed.workers, w)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			kind, rest, _ := strings.Cut(sc.Text(), " ")
			term, _ := strconv.ParseUint(rest, 10, 64)
			ed.events <- electionEvent{w: w, kind: kind, term: term, at: time.Now(), text: rest}
		}
		ed.events <- electionEvent{w: w, kind: "exit", at: time.Now()}
	}()
	return nil
}

// drop forgets a dead worker.
func (ed *electionDemo) drop(w *electionWorker) {
	ed.workers = slices.DeleteFunc(ed.workers, func(x *electionWorker) bool { return x == w })
}

// await returns the next event of kind (matching ok, if given), keeping
// the others in ed.seen; an "error" event fails.
func (ed *electionDemo) await(ctx context.Context, kind string, ok func(electionEvent) bool, timeout time.Duration) (electionEvent, error) {
	for i, e := range ed.pending {
		if e.kind == kind && (ok == nil || ok(e)) {
			ed.pending = slices.Delete(ed.pending, i, i+1)
			return e, nil
		}
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case e := <-ed.events:
			ed.seen = append(ed.seen, e)
			switch {
			case e.kind == "error":
				return e, fmt.Errorf("%s: %s", e.w.id, e.text)
			case e.kind == kind && (ok == nil || ok(e)):
				return e, nil
			case e.kind == "leading" || e.kind == "lost" || e.kind == "ready":
				ed.pending = append(ed.pending, e)
			}
		case <-t.C:
			return electionEvent{}, fmt.Errorf("no %q event within %v", kind, timeout)
		case <-ctx.Done():
			return electionEvent{}, ctx.Err()
		}
	}
}

// drain records the events that arrived meanwhile.
func (ed *electionDemo) drain() {
	for {
		select {
		case e := <-ed.events:
			ed.seen = append(ed.seen, e)
			if e.kind == "leading" || e.kind == "lost" || e.kind == "ready" {
				ed.pending = append(ed.pending, e)
			}
		default:
			return
		}
	}
}

func (ed *electionDemo) stopAll() {
	for _, w := range ed.workers {
		_ = w.cmd.Process.Signal(syscall.SIGCONT)
		_ = w.stdin.Close()
		_ = w.cmd.Process.Kill()
		_ = w.cmd.Wait()
	}
}

func (ed *electionDemo) fail(err error) int {
	ed.a.errorf("demo: election: %v", err)
	return exitNotAcquired
}

// median of ds (0 for none).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
