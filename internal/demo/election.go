package demo

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/benchkit"
	"github.com/redis/go-redis/v9"
)

// The election scenario: worker processes campaign in one election; the
// demo kills the leader (kill -9), pauses the next (SIGSTOP past its TTL)
// and makes the next resign, and shows how long each takeover took and
// that no two leaders acted in one term. Every leader increments a fenced
// counter while it leads: a script that refuses a term older than the
// newest it has seen and records which worker wrote in each term.

func electionName(ns string) string    { return ns + ":leader" }
func electionCounter(ns string) string { return ns + ":counter" }
func electionWriters(ns string) string { return ns + ":writers" }

//go:embed scripts/fenced_counter.lua
var fencedCounterLua string

// fencedCounterScript is the protected resource of the election.
var fencedCounterScript = redis.NewScript(fencedCounterLua)

// electionWorker campaigns, and while leading writes to the fenced counter
// every s.Act, checking its leadership first. Events on stdout, one per
// line: "ready", "leading <term>", "lost <term>", "resigned <term>",
// "refused <term>" (a write the counter refused), "error <text>".
// "resign" on stdin resigns; the worker then campaigns again, as it does
// after a loss. It returns when stdin ends (the demo went away).
func electionWorker(ctx context.Context, rdb redis.UniversalClient, s spec, stdin io.Reader, stdout io.Writer) error {
	c, err := dlock.New(rdb, dlock.Options{Prefix: s.NS, TTL: s.TTL, AllowEviction: s.AllowEviction})
	if err != nil {
		return err
	}
	defer c.Close()
	el := c.Election(s.Name, dlock.ElectionOptions{TTL: s.TTL})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resign := make(chan struct{}, 1)
	go func() {
		defer cancel() // the demo went away
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			if sc.Text() == "resign" {
				select {
				case resign <- struct{}{}:
				default:
				}
			}
		}
	}()
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, format+"\n", args...)
	}
	say("ready")
	for {
		l, err := el.Campaign(ctx, s.ID)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			say("error %s", strings.ReplaceAll(err.Error(), "\n", "; "))
			return err
		}
		select { // a resign sent before this term does not end it
		case <-resign:
		default:
		}
		term := l.Term()
		say("leading %d", term)
		t := time.NewTicker(s.Act)
	lead:
		for {
			select {
			case <-resign:
				_ = l.Resign(ctx)
				say("resigned %d", term)
				break lead
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			// Check the leadership before every act: a leader paused past
			// its lease finds the loss here when it resumes.
			if l.Err() != nil {
				say("lost %d", term)
				break lead
			}
			ok, err := fencedCounterScript.Run(ctx, rdb, []string{electionCounter(s.NS), electionWriters(s.NS)},
				term, s.ID).Int()
			if err == nil && ok == 0 {
				say("refused %d", term)
			}
		}
		t.Stop()
	}
}

// candidate is a running election worker, seen from the demo.
type candidate struct {
	id    string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

type electionEvent struct {
	w    *candidate
	kind string // ready, leading, lost, resigned, refused, error, exit
	term uint64
	at   time.Time
	text string
}

// electionDemo is one run of the election scenario.
type electionDemo struct {
	*demo
	c       *dlock.Client
	spec    spec
	next    int
	workers []*candidate
	events  chan electionEvent
	leader  *candidate
	term    uint64
	seen    []electionEvent // every event received
	pending []electionEvent // leading, lost and ready events not awaited yet
}

func (d *demo) election(ctx context.Context) error {
	c, err := dlock.New(d.env.RDB, dlock.Options{Prefix: d.env.NS, AllowEviction: d.env.AllowEviction})
	if err != nil {
		return err
	}
	defer c.Close()
	ed := &electionDemo{demo: d, c: c, events: make(chan electionEvent, 1024),
		spec: spec{Scenario: "election", NS: d.env.NS, AllowEviction: d.env.AllowEviction, TTL: d.o.TTL, Act: 10 * time.Millisecond, Name: electionName(d.env.NS)}}
	defer ed.stopAll()
	err = ed.run(ctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, ErrRedis) || errors.Is(err, ErrInexact):
		return err
	}
	return fmt.Errorf("election: %w", err)
}

func (ed *electionDemo) run(ctx context.Context) error {
	o := ed.o
	ed.header("Leader election: %d worker processes campaign in one election (TTL %v). While it leads, a\n", o.Workers, o.TTL)
	ed.header("worker checks its leadership, then increments a fenced counter with its term every %v; the\n", ed.spec.Act)
	ed.header("counter refuses a term older than the newest it has seen and records who wrote in each term.\n")
	ed.header("Redis: %s\n\n", ed.env.Where)
	for range o.Workers {
		if err := ed.start(); err != nil {
			return err
		}
	}
	for range o.Workers {
		if _, err := ed.await(ctx, "ready", nil, time.Minute); err != nil {
			return err
		}
	}
	ev, err := ed.await(ctx, "leading", nil, time.Minute)
	if err != nil {
		return err
	}
	ed.leader, ed.term = ev.w, ev.term
	ed.header("%-28s %-10s %-18s %s\n", "event", "new leader", "term", "takeover")
	ed.header("%-28s %-10s %-18d %s\n", "first election", ev.w.id, ev.term, "-")
	takeovers := map[string][]time.Duration{}
	for range o.Rounds {
		for _, kind := range []string{"kill", "pause", "resign"} {
			d, err := ed.takeover(ctx, kind)
			if err != nil {
				return err
			}
			takeovers[kind] = append(takeovers[kind], d)
		}
	}
	time.Sleep(3 * ed.spec.Act) // the last leader writes a little
	res, err := ed.env.RDB.HGetAll(ctx, electionCounter(ed.env.NS)).Result()
	if err != nil {
		return ed.redisErr(err)
	}
	writers, err := ed.env.RDB.HLen(ctx, electionWriters(ed.env.NS)).Result()
	if err != nil {
		return ed.redisErr(err)
	}
	conflicts, _ := strconv.Atoi(res["conflicts"])
	refused, _ := strconv.Atoi(res["refused"])
	fd := benchkit.FormatDuration
	ed.header("\nfenced counter: %s writes in %d terms; %d refused (a deposed leader's term); terms with two writers: %d\n",
		res["n"], writers, refused, conflicts)
	ed.header("takeover (median of %d): after kill -9 %s, after SIGSTOP %s (both bounded by the TTL, %v), after resign %s\n",
		o.Rounds, fd(median(takeovers["kill"])), fd(median(takeovers["pause"])), o.TTL, fd(median(takeovers["resign"])))
	ed.header("\nkill -9:  the leader dies without a word; its lease runs out and the next candidate in line leads.\n")
	ed.header("SIGSTOP:  the leader is paused past its lease; the next leads; on resume the paused worker finds\n")
	ed.header("          its leadership lost (Err) before acting, and a write already under way is refused by term.\n")
	ed.header("resign:   the lock is handed to the next candidate at once.\n")
	return verdict(conflicts > 0)
}

// takeover makes the leader go (kind: kill, pause, resign), waits for the
// next leader and prints the row. It returns the takeover time.
func (ed *electionDemo) takeover(ctx context.Context, kind string) (time.Duration, error) {
	// Every other candidate queued, so one is in line.
	adm, err := admin.New(ed.env.RDB, admin.Options{Prefix: ed.c.Options().Prefix})
	if err != nil {
		return 0, err
	}
	q := adm.KeysFor(ed.spec.Name).Queue
	want := int64(len(ed.workers) - 1)
	for deadline := time.Now().Add(time.Minute); ed.env.RDB.LLen(ctx, q).Val() < want; time.Sleep(10 * time.Millisecond) {
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
	ev, err := ed.await(ctx, "leading", func(e electionEvent) bool { return e.w != old }, time.Minute+2*ed.o.TTL)
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
	ed.header("%-28s %-10s %-18d %s%s\n", label, ev.w.id, ev.term, benchkit.FormatDuration(took), note)
	return took, nil
}

// refusedOf counts the refused writes w reported so far.
func (ed *electionDemo) refusedOf(w *candidate) int {
	ed.drain()
	n := 0
	for _, e := range ed.seen {
		if e.w == w && e.kind == "refused" {
			n++
		}
	}
	return n
}

// start starts one more candidate.
func (ed *electionDemo) start() error {
	ed.next++
	s := ed.spec
	s.ID = "worker-" + strconv.Itoa(ed.next)
	cmd, stdin, stdout, err := ed.demo.start(s)
	if err != nil {
		return err
	}
	w := &candidate{id: s.ID, cmd: cmd, stdin: stdin}
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

// drop forgets a dead candidate.
func (ed *electionDemo) drop(w *candidate) {
	ed.workers = slices.DeleteFunc(ed.workers, func(x *candidate) bool { return x == w })
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
