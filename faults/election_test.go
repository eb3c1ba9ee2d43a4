package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fenced"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Leader elections under command-level and server faults. Candidates (each
// its own Client, behind its own proxy, under the random command-fault
// schedule) campaign, act while they lead and resign at random; observers
// (faulted the same way) watch. The nemesis resets the proxies'
// connections, stalls the server (DEBUG SLEEP) and adds latency. The
// history is checked for:
//
//   - E1, at most one leader acting per term, and no overlap: every act is
//     timed before its leadership check (Err), which passed; the span from
//     a term's first act to its last must not overlap another term's, and
//     spans are ordered as their terms. Each term is claimed by one
//     candidate.
//   - E2, terms increase: every term a Campaign returned is in the
//     election's history, and the history's terms strictly increase.
//   - E3, every observer's sequence is a subsequence of the true one (the
//     history), with strictly increasing (term, revision), no record the
//     history lacks, and, once the faults stop, every leader delivered
//     (no silent gap).

// electAct is one act of a leader: the time before its check, its term.
type electAct struct {
	at   time.Time
	term uint64
	who  string
}

type electHistory struct {
	mu      sync.Mutex
	acts    []electAct
	claimed map[uint64]string // term -> candidate whose Campaign returned it
	errs    []string
}

func (h *electHistory) act(a electAct) {
	h.mu.Lock()
	h.acts = append(h.acts, a)
	h.mu.Unlock()
}

func (h *electHistory) claim(term uint64, who string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if other, ok := h.claimed[term]; ok && other != who {
		h.errs = append(h.errs, fmt.Sprintf("E1: term %d returned to %s and %s", term, other, who))
	}
	h.claimed[term] = who
}

func TestElectionHistories(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server bool // server faults besides the command faults
	}{{"cmd faults", false}, {"cmd+server faults", true}} {
		t.Run(tc.name, func(t *testing.T) { electionHistory(t, tc.server) })
	}
}

func electionHistory(t *testing.T, serverFaults bool) {
	ctx := t.Context()
	lock := redistest.Start(t, redistest.Config{})
	seed := suiteSeed ^ uint64(len(t.Name()))
	const (
		candidates = 4
		observers  = 2
		ttl        = 600 * time.Millisecond
		poll       = 100 * time.Millisecond
	)
	run := 3 * time.Second
	if testing.Short() {
		run = 1500 * time.Millisecond
	}
	name := "election"
	resource := fmt.Sprintf("election-res:%d", seed)
	res := resSrv.NewClient()
	defer res.Close()

	var proxies []*redistest.Proxy
	var injectors []*faultcmd.Injector
	client := func(i int) *dlock.Client {
		px := redistest.NewProxy(t, lock.Addr())
		proxies = append(proxies, px)
		rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: 3,
			ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
		inj := faultcmd.New()
		rdb.AddHook(inj)
		inj.SetRandom(&faultcmd.Random{Seed: seed + uint64(i), DropReply: defaultSchedule.drop,
			FailBefore: defaultSchedule.fail, Delay: defaultSchedule.delay, MaxDelay: defaultSchedule.maxDelay})
		injectors = append(injectors, inj)
		c, err := dlock.New(rdb, dlock.Options{WaiterLease: 900 * time.Millisecond,
			PickupTimeout: 300 * time.Millisecond, RetryInterval: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })
		return c
	}
	election := func(c *dlock.Client) *dlock.Election {
		e := c.Election(name, dlock.ElectionOptions{TTL: ttl, PollInterval: poll})
		return e
	}

	h := &electHistory{claimed: map[uint64]string{}}
	// Observers first, so they see every leader.
	octx, stopObs := context.WithCancel(ctx)
	defer stopObs()
	seen := make([][]dlock.LeaderInfo, observers)
	var owg sync.WaitGroup
	for i := range observers {
		ch := election(client(100 + i)).Observe(octx)
		owg.Add(1)
		go func() {
			defer owg.Done()
			for li := range ch {
				if li.NoLeader {
					continue // a gap between leaders: checked in the package's own tests
				}
				seen[i] = append(seen[i], li)
			}
		}()
	}

	stop := time.Now().Add(run)
	var wg sync.WaitGroup
	for i := range candidates {
		e := election(client(i))
		who := "c" + strconv.Itoa(i)
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				cctx, cancel := context.WithDeadline(ctx, stop)
				l, err := e.Campaign(cctx, who)
				cancel()
				if err != nil {
					continue // ctx ran out, or Redis failed: stand again
				}
				h.claim(l.Term(), who)
				acts := 1 + rng.IntN(8)
				for n := 0; n < acts && time.Now().Before(stop); n++ {
					at := time.Now() // before the check: the check passed no earlier
					if l.Err() != nil {
						break
					}
					h.act(electAct{at: at, term: l.Term(), who: who})
					err := fenced.Set(ctx, res, resource, l.Term(), who+":"+strconv.FormatUint(l.Term(), 10), who)
					if err != nil && !errors.Is(err, fenced.ErrStale) {
						h.mu.Lock()
						h.errs = append(h.errs, "resource: "+err.Error())
						h.mu.Unlock()
					}
					time.Sleep(time.Duration(5+rng.IntN(30)) * time.Millisecond)
				}
				rctx, rcancel := context.WithTimeout(ctx, time.Second)
				_ = l.Resign(rctx) // a failed resign is a loss: the lease runs out
				rcancel()
			}
		}()
	}

	// The nemesis.
	nemesis := 0
	if serverFaults {
		admin := lock.NewClient()
		defer admin.Close()
		rng := rand.New(rand.NewPCG(seed, 99))
		for time.Now().Before(stop.Add(-300 * time.Millisecond)) {
			time.Sleep(time.Duration(150+rng.IntN(250)) * time.Millisecond)
			nemesis++
			switch rng.IntN(3) {
			case 0:
				proxies[rng.IntN(len(proxies))].CutAll()
			case 1:
				_ = admin.Do(ctx, "debug", "sleep", "0.2").Err()
			case 2:
				px := proxies[rng.IntN(len(proxies))]
				for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
					px.SetLatency(time.Duration(rng.IntN(31)) * time.Millisecond)
				}
				px.SetLatency(0)
			}
		}
	}
	wg.Wait()
	injected := map[string]int{}
	for _, inj := range injectors {
		inj.SetEnabled(false) // the settling reads are not faulted
		for _, e := range inj.Log() {
			injected[e.Action.String()]++
		}
	}
	// Settle: observers catch up within a few polls once faults stop.
	direct := lock.NewClient()
	defer direct.Close()
	hist, err := direct.LRange(ctx, "dlock:{"+name+"}:leader", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(hist) // oldest first
	truth := make([]dlock.LeaderInfo, 0, len(hist))
	for _, r := range hist {
		f := strings.SplitN(r, ":", 5)
		if len(f) != 5 {
			t.Fatalf("history record %q", r)
		}
		term, _ := strconv.ParseUint(f[0], 10, 64)
		rev, _ := strconv.ParseUint(f[1], 10, 64)
		truth = append(truth, dlock.LeaderInfo{Term: term, Rev: rev, Value: f[4]})
	}
	if len(truth) >= 64 {
		t.Fatalf("%d leaders: the history is full, the scenario is too long to check completeness", len(truth))
	}
	last := truth[len(truth)-1]
	deadline := time.Now().Add(10 * poll)
	for time.Now().Before(deadline) {
		time.Sleep(poll)
	}
	stopObs()
	owg.Wait()

	var bad []string
	bad = append(bad, h.errs...)
	// E1: per-term act spans do not overlap and are ordered as the terms.
	type span struct {
		term        uint64
		first, last time.Time
		who         string
	}
	spans := map[uint64]*span{}
	for _, a := range h.acts {
		s := spans[a.term]
		if s == nil {
			spans[a.term] = &span{term: a.term, first: a.at, last: a.at, who: a.who}
			continue
		}
		if s.who != a.who {
			bad = append(bad, fmt.Sprintf("E1: term %d acted on by %s and %s", a.term, s.who, a.who))
		}
		if a.at.Before(s.first) {
			s.first = a.at
		}
		if a.at.After(s.last) {
			s.last = a.at
		}
	}
	var ordered []*span
	for _, s := range spans {
		ordered = append(ordered, s)
	}
	slices.SortFunc(ordered, func(a, b *span) int { return a.first.Compare(b.first) })
	for i := 1; i < len(ordered); i++ {
		p, s := ordered[i-1], ordered[i]
		if !p.last.Before(s.first) {
			bad = append(bad, fmt.Sprintf("E1: term %d (%s) acted until %s, after term %d (%s) began acting at %s",
				p.term, p.who, p.last.Format("15:04:05.000000"), s.term, s.who, s.first.Format("15:04:05.000000")))
		}
		if s.term <= p.term {
			bad = append(bad, fmt.Sprintf("E1: term %d acted after term %d", s.term, p.term))
		}
	}
	// E2: the history's terms increase; every returned term is in it.
	inHist := map[uint64]bool{}
	for i, r := range truth {
		inHist[r.Term] = true
		if i > 0 && r.Term <= truth[i-1].Term {
			bad = append(bad, fmt.Sprintf("E2: history term %d after %d", r.Term, truth[i-1].Term))
		}
	}
	for term, who := range h.claimed {
		if !inHist[term] {
			bad = append(bad, fmt.Sprintf("E2: %s was elected with term %d, which the history lacks", who, term))
		}
	}
	// E3: observers.
	for i, obs := range seen {
		j := 0
		for k, li := range obs {
			if k > 0 && !(li.Term > obs[k-1].Term || li.Term == obs[k-1].Term && li.Rev > obs[k-1].Rev) {
				bad = append(bad, fmt.Sprintf("E3: observer %d: %d/%d after %d/%d", i, li.Term, li.Rev, obs[k-1].Term, obs[k-1].Rev))
			}
			for j < len(truth) && truth[j].Term != li.Term {
				j++
			}
			if j == len(truth) {
				bad = append(bad, fmt.Sprintf("E3: observer %d saw term %d (%s), not in the history (in order)", i, li.Term, li.Value))
				break
			}
			if li.Value != truth[j].Value || li.Missed {
				bad = append(bad, fmt.Sprintf("E3: observer %d saw %+v, history has %+v", i, li, truth[j]))
			}
		}
		got := map[uint64]bool{}
		for _, li := range obs {
			got[li.Term] = true
		}
		missing := 0
		for _, r := range truth {
			if !got[r.Term] && r.Term >= obs0Term(obs) {
				missing++
			}
		}
		if missing > 0 {
			bad = append(bad, fmt.Sprintf("E3: observer %d never saw %d of the %d leaders (last: term %d)", i, missing, len(truth), last.Term))
		}
	}
	t.Logf("seed %d: %d leaders, %d acts, observers saw %d and %d; injected %v; %d server faults",
		seed, len(truth), len(h.acts), len(seen[0]), len(seen[1]), injected, nemesis)
	for _, b := range bad {
		t.Error(b)
	}
}

// obs0Term is the first term an observer delivered: leaders before it
// came before the observer started (0: none delivered).
func obs0Term(obs []dlock.LeaderInfo) uint64 {
	if len(obs) == 0 {
		return 0
	}
	return obs[0].Term
}
