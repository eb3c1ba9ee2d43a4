package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func newElection(t testing.TB, c *dlock.Client, name string, opts dlock.ElectionOptions) *dlock.Election {
	t.Helper()
	e := c.Election(name, opts)
	return e
}

// A campaign blocks while another candidate leads; Resign hands the lock
// to it at once, with a higher term; Leader reports each in turn.
func TestElectionCampaignResign(t *testing.T) {
	ctx := t.Context()
	c1, _ := newClient(t, dlock.Options{})
	c2, _ := newClient(t, dlock.Options{})
	name := key(t)
	e1 := newElection(t, c1, name, dlock.ElectionOptions{TTL: time.Minute})
	e2 := newElection(t, c2, name, dlock.ElectionOptions{TTL: time.Minute})

	if _, err := e1.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
	}
	a, err := e1.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	li, err := e2.Leader(ctx)
	if err != nil || li.Value != "a" || li.Term != a.Term() || li.Rev != 1 {
		t.Fatalf("Leader = %+v, %v; want a, term %d", li, err, a.Term())
	}
	if age := time.Since(li.Since); age < -time.Second || age > 10*time.Second {
		t.Errorf("Since is %v ago", age)
	}
	elected := make(chan *dlock.Leadership, 1)
	go func() {
		b, err := e2.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		elected <- b
	}()
	select {
	case <-elected:
		t.Fatal("b elected while a leads")
	case <-time.After(100 * time.Millisecond):
	}
	resigned := time.Now()
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-elected
	if b == nil {
		t.FailNow()
	}
	t.Logf("b elected %v after a resigned (TTL 1m)", time.Since(resigned))
	if b.Term() <= a.Term() {
		t.Errorf("b's term %d not above a's %d", b.Term(), a.Term())
	}
	if !errors.Is(a.Err(), dlock.ErrReleased) {
		t.Errorf("a.Err() = %v after Resign", a.Err())
	}
	if err := a.Resign(ctx); err != nil {
		t.Errorf("second Resign: %v", err)
	}
	if err := a.Proclaim(ctx, "again"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Proclaim after Resign: %v", err)
	}
	li, err = e1.Leader(ctx)
	if err != nil || li.Value != "b" || li.Term != b.Term() {
		t.Fatalf("Leader = %+v, %v; want b", li, err)
	}
	if err := b.Proclaim(ctx, "b2"); err != nil {
		t.Fatal(err)
	}
	li, err = e1.Leader(ctx)
	if err != nil || li.Value != "b2" || li.Term != b.Term() || li.Rev != 2 {
		t.Fatalf("Leader after Proclaim = %+v, %v", li, err)
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e1.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader after the last resigned: %v, want ErrNoLeader", err)
	}
}

// Bad input is refused before any Redis call (bad arguments of
// Client.Election: TestConstructorsReportBadArgsFromMethods).
func TestElectionBadInput(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	e := newElection(t, c, key(t), dlock.ElectionOptions{})
	if _, err := e.Campaign(t.Context(), strings.Repeat("x", dlock.MaxLeaderValue+1)); !errors.Is(err, dlock.ErrValueTooLong) || !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("long value: %v", err)
	}
	//lint:ignore SA1012 a nil context is the point
	if _, err := e.Leader(nil); !errors.Is(err, dlock.ErrNilContext) { //nolint:staticcheck
		t.Errorf("nil ctx: %v", err)
	}
	if err := e.Run(t.Context(), "v", dlock.RunConfig{}); !errors.Is(err, dlock.ErrInvalidOpts) {
		t.Errorf("Run without OnStartedLeading: %v", err)
	}
	// The election's own keys are reserved.
	for _, suffix := range []string{":leader", ":elected"} {
		name := strings.TrimSuffix(adminOf(t, c).KeysFor("x").Fence, ":fence") + suffix
		if k, kind, ok := adminOf(t, c).AuxKeyOf(name); !ok || k != "x" || string(kind) != suffix[1:] {
			t.Errorf("AuxKeyOf(%q) = %q, %q, %v", name, k, kind, ok)
		}
	}
}

// Observers see every leader, in order, with strictly increasing terms,
// even leaders that came and went between two of their reads; 1,000
// observers on one Client share one subscription.
func TestElectionObserveEveryLeader(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c, rdb := newClient(t, dlock.Options{})
	name := key(t)
	e := newElection(t, c, name, dlock.ElectionOptions{TTL: 10 * time.Second, PollInterval: 50 * time.Millisecond})

	const observers = 1000
	chans := make([]<-chan dlock.LeaderInfo, observers)
	for i := range chans {
		chans[i] = e.Observe(ctx)
	}
	got := make([][]dlock.LeaderInfo, observers)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for li := range ch {
				mu.Lock()
				got[i] = append(got[i], li)
				mu.Unlock()
			}
		}()
	}
	// Wait until the channel is subscribed (the feed's first read).
	_, ch := dlock.ElectionNames(e)
	for deadline := time.Now().Add(10 * time.Second); rdb.PubSubNumSub(ctx, ch).Val()[ch] == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the election channel was never subscribed")
		}
	}
	if n := rdb.PubSubNumSub(ctx, ch).Val()[ch]; n != 1 {
		t.Errorf("%d subscriptions for %d observers on one Client, want 1", n, observers)
	}
	// Each observer first says that nobody leads.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n := 0
		mu.Lock()
		for _, g := range got {
			if len(g) > 0 {
				n++
			}
		}
		mu.Unlock()
		if n == observers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d observers said anything before the first leader", n, observers)
		}
	}

	// Leaders on other Clients, one after another; some proclaim.
	var truth []dlock.LeaderInfo
	others := make([]*dlock.Client, 3)
	for i := range others {
		others[i], _ = newClient(t, dlock.Options{})
	}
	for i := range 12 {
		ei := newElection(t, others[i%3], name, dlock.ElectionOptions{TTL: 10 * time.Second})
		l, err := ei.Campaign(ctx, fmt.Sprint("leader-", i))
		if err != nil {
			t.Fatal(err)
		}
		truth = append(truth, dlock.LeaderInfo{Value: fmt.Sprint("leader-", i), Term: l.Term(), Rev: 1})
		if i%4 == 0 {
			if err := l.Proclaim(ctx, fmt.Sprint("leader-", i, "-again")); err != nil {
				t.Fatal(err)
			}
			truth = append(truth, dlock.LeaderInfo{Value: fmt.Sprint("leader-", i, "-again"), Term: l.Term(), Rev: 2})
		}
		if i%3 == 0 {
			time.Sleep(60 * time.Millisecond) // some are read while they lead
		}
		if err := l.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	last := truth[len(truth)-1]
	// Observers deliver the last leader, then that nobody leads, within a
	// poll interval or so.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		done := 0
		mu.Lock()
		for _, g := range got {
			if n := len(g); n > 1 && g[n-1].NoLeader && g[n-2].Term == last.Term && g[n-2].Rev == last.Rev {
				done++
			}
		}
		mu.Unlock()
		if done == observers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d observers saw the last leader", done, observers)
		}
	}
	cancel()
	wg.Wait()
	for i, g := range got {
		if g[0] != (dlock.LeaderInfo{NoLeader: true}) {
			t.Fatalf("observer %d first observed %+v before any leader, want NoLeader", i, g[0])
		}
		checkObserved(t, fmt.Sprint("observer ", i), g[1:], truth)
	}
	if len(got[0][1:]) != len(truth) {
		t.Logf("observer 0 saw %d of %d changes (pub/sub plus polling should see all)", len(got[0][1:]), len(truth))
	}
}

// checkObserved checks that seen is a subsequence of truth with strictly
// increasing (Term, Rev), and holds every leader of truth (the history
// keeps them all here).
func checkObserved(t *testing.T, who string, seen, truth []dlock.LeaderInfo) {
	t.Helper()
	// A NoLeader event follows a leader, never another NoLeader, and says
	// nothing else.
	leaders := seen[:0:0]
	for k, s := range seen {
		if !s.NoLeader {
			leaders = append(leaders, s)
			continue
		}
		if k == 0 || seen[k-1].NoLeader || s != (dlock.LeaderInfo{NoLeader: true}) {
			t.Errorf("%s: NoLeader event %d of %+v", who, k, seen)
			return
		}
	}
	seen = leaders
	j := 0
	for k, s := range seen {
		if k > 0 && !(s.Term > seen[k-1].Term || s.Term == seen[k-1].Term && s.Rev > seen[k-1].Rev) {
			t.Errorf("%s: %+v after %+v: not increasing", who, s, seen[k-1])
			return
		}
		for j < len(truth) && !(truth[j].Term == s.Term && truth[j].Rev == s.Rev && truth[j].Value == s.Value) {
			j++
		}
		if j == len(truth) {
			t.Errorf("%s: %+v is not in the true sequence (in order)", who, s)
			return
		}
		if s.Missed {
			t.Errorf("%s: Missed set on %+v", who, s)
		}
	}
	terms := map[uint64]bool{}
	for _, s := range seen {
		terms[s.Term] = true
	}
	for _, tr := range truth {
		if !terms[tr.Term] {
			t.Errorf("%s: leader of term %d (%s) never seen", who, tr.Term, tr.Value)
			return
		}
	}
}

// Observe delivers the current leader first, and its channel is closed
// when ctx ends.
func TestElectionObserveCurrentThenClose(t *testing.T) {
	ctx := t.Context()
	c, _ := newClient(t, dlock.Options{})
	e := newElection(t, c, key(t), dlock.ElectionOptions{})
	l, err := e.Campaign(ctx, "now")
	if err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithCancel(ctx)
	ch := e.Observe(octx)
	li := <-ch
	if li.Value != "now" || li.Term != l.Term() {
		t.Fatalf("first observed %+v", li)
	}
	cancel()
	for range ch {
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A publication re-sent by the Redis client (its first reply lost) changes
// nothing: the history keeps one record per revision.
func TestElectionPublishResent(t *testing.T) {
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{})
	e := newElection(t, c, key(t), dlock.ElectionOptions{})
	l, err := e.Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	hist, _ := dlock.ElectionNames(e)
	for range 3 {
		if err := dlock.RepublishForTest(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if recs := rdb.LRange(ctx, hist, 0, -1).Val(); len(recs) != 1 {
		t.Fatalf("history %q after re-sent publications of rev 1, want one record", recs)
	}
	if err := l.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := dlock.RepublishForTest(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	recs := rdb.LRange(ctx, hist, 0, -1).Val()
	if len(recs) != 2 || !strings.HasSuffix(recs[0], ":v2") || !strings.HasPrefix(recs[0], fmt.Sprintf("%d:2:", l.Term())) ||
		!strings.HasSuffix(recs[1], ":v1") {
		t.Fatalf("history %q, want the records of term %d, rev 2 (v2) then rev 1 (v1)", recs, l.Term())
	}
	if ttl := rdb.PTTL(ctx, hist).Val(); ttl <= 0 {
		t.Errorf("history TTL %v: it must expire", ttl)
	}
	// An older leader's publication (its lock gone) writes nothing.
	if err := rdb.Set(ctx, e.Name(), "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Proclaim(ctx, "v3"); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Proclaim by a deposed leader: %v, want ErrLost", err)
	}
	if recs := rdb.LRange(ctx, hist, 0, -1).Val(); len(recs) != 2 || !strings.HasSuffix(recs[0], ":v2") {
		t.Fatalf("history after a deposed leader's Proclaim: %q", recs)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader with a foreign holder: %v, want ErrNoLeader", err)
	}
	rdb.Del(ctx, e.Name())
}

// Run calls the callbacks in order: elected, then (ctx cancelled on loss)
// stopped; and the observer callback sees each leader.
func TestElectionRunCallbacks(t *testing.T) {
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{})
	name := key(t)
	e := newElection(t, c, name, dlock.ElectionOptions{TTL: 2 * time.Second, PollInterval: 50 * time.Millisecond})
	var mu sync.Mutex
	var events []string
	add := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	started := make(chan struct{})
	var cause error
	err := e.Run(ctx, "me", dlock.RunConfig{
		OnStartedLeading: func(lctx context.Context, _ *dlock.Leadership) {
			add("started")
			close(started)
			// Someone deletes the key: the watchdog's renewal finds it
			// gone and the leading context is cancelled with the loss.
			rdb.Del(context.Background(), name)
			<-lctx.Done()
			cause = context.Cause(lctx)
		},
		OnStoppedLeading: func() { add("stopped") },
		OnNewLeader:      func(li dlock.LeaderInfo) { add("leader " + li.Value) },
	})
	if !errors.Is(err, dlock.ErrLost) || !errors.Is(cause, dlock.ErrLost) {
		t.Fatalf("Run = %v, cause %v; want the loss", err, cause)
	}
	mu.Lock()
	defer mu.Unlock()
	if i := indexOf(events, "started"); i < 0 || indexOf(events, "stopped") < i {
		t.Fatalf("events %q", events)
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// topoElection: elections work on Sentinel and Cluster like every other
// primitive (the history and channel live in the lock's slot).
func topoElection(t *testing.T, tp *topo) {
	{
		{
			ctx := t.Context()
			c1, _ := tp.client(t, dlock.Options{})
			c2, _ := tp.client(t, dlock.Options{})
			for _, name := range topoKeys[:3] {
				name := name + ":" + key(t)
				e1 := newElection(t, c1, name, dlock.ElectionOptions{PollInterval: 100 * time.Millisecond})
				e2 := newElection(t, c2, name, dlock.ElectionOptions{PollInterval: 100 * time.Millisecond})
				octx, cancel := context.WithCancel(ctx)
				obs := e2.Observe(octx)
				select {
				case li := <-obs:
					if !li.NoLeader {
						t.Fatalf("first observed %+v on a new election, want NoLeader", li)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("no NoLeader at the start")
				}
				a, err := e1.Campaign(ctx, "a")
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan *dlock.Leadership, 1)
				go func() {
					b, err := e2.Campaign(ctx, "b")
					if err != nil {
						t.Error(err)
					}
					got <- b
				}()
				if li := <-obs; li.Value != "a" || li.Term != a.Term() {
					t.Fatalf("observed %+v, want a", li)
				}
				// b may not be queued yet when a resigns: nobody leads
				// for a moment then.
				if err := a.Resign(ctx); err != nil {
					t.Fatal(err)
				}
				b := <-got
				if b == nil {
					t.FailNow()
				}
				li := <-obs
				if li.NoLeader {
					li = <-obs
				}
				if li.Value != "b" || li.Term != b.Term() || b.Term() <= a.Term() {
					t.Fatalf("observed %+v, want b with a term above %d", li, a.Term())
				}
				if err := b.Resign(ctx); err != nil {
					t.Fatal(err)
				}
				cancel()
			}
		}
	}
}

var _ = redis.Nil

// Without pub/sub (a Ring has no shared subscription), observers still see
// every leader, in order, by the polling fallback alone.
func TestElectionObservePollingOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": redisAddr}})
	c, err := dlock.New(ring, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(); _ = ring.Close() })
	name := key(t)
	e := newElection(t, c, name, dlock.ElectionOptions{PollInterval: 30 * time.Millisecond})
	obs := e.Observe(ctx)
	select { // the feed's first read: no leader yet
	case li := <-obs:
		if li != (dlock.LeaderInfo{NoLeader: true}) {
			t.Fatalf("first observed %+v on a new election, want NoLeader", li)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no NoLeader at the start")
	}
	other, _ := newClient(t, dlock.Options{})
	eo := newElection(t, other, name, dlock.ElectionOptions{})
	var truth []dlock.LeaderInfo
	for i := range 5 {
		l, err := eo.Campaign(ctx, fmt.Sprint("p", i))
		if err != nil {
			t.Fatal(err)
		}
		truth = append(truth, dlock.LeaderInfo{Value: fmt.Sprint("p", i), Term: l.Term(), Rev: 1})
		if err := l.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var seen []dlock.LeaderInfo
	for n := 0; n < len(truth); {
		select {
		case li := <-obs:
			seen = append(seen, li)
			if !li.NoLeader {
				n++
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("saw %d of %d leaders: %+v", len(seen), len(truth), seen)
		}
	}
	checkObserved(t, "ring observer", seen, truth)
}

// countingHandler counts the log records at or above WARN whose message
// contains match.
type countingHandler struct {
	match string
	n     atomic.Int64
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && strings.Contains(r.Message, h.match) {
		h.n.Add(1)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// TestObserveWarnsOnceWhenReadsFail: observers that cannot read the
// leaders are not silent: the Client warns once per outage, not at every
// poll.
func TestObserveWarnsOnceWhenReadsFail(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	h := &countingHandler{match: "reading an election's leaders failed"}
	rdb := s.NewClient()
	c, _ := newClientOn(t, rdb, dlock.Options{Logger: slog.New(h)})
	e := newElection(t, c, key(t), dlock.ElectionOptions{TTL: time.Second, PollInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_ = e.Observe(ctx)
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); h.n.Load() == 0; {
		if time.Now().After(end) {
			t.Fatal("no warning while the leaders cannot be read")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // many more failed polls
	if n := h.n.Load(); n != 1 {
		t.Fatalf("%d warnings for one outage, want 1", n)
	}
}
