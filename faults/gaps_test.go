package faults

import (
	"slices"
	"testing"
	"time"
)

// Spans in which a lock key had no holder, from a history's grants and
// acquire calls (the live reshard's figures).

// gaps is the longest span a key had no holder (idle), and the longest it
// had no holder while an acquire call on it was in progress (blocked).
type gaps struct {
	idle, blocked       int64
	idleKey, blockedKey string
}

// holderGaps measures gaps within [from, to] over keys. A grant is held from
// its return to the first of its Unlock call, its loss signal and its last
// deadline; an acquire call waits from its invocation to its completion.
func holderGaps(events []event, keys []string, from, to int64) gaps {
	type step struct {
		t            int64
		held, waited int
	}
	type hold struct {
		start, end int64
		ended      bool
	}
	holds := map[string]map[string]*hold{} // key, owner
	steps := map[string][]step{}
	calls := map[uint64]int64{} // acquire invocations in progress, by id
	for _, e := range events {
		if !slices.Contains(keys, e.Key) {
			continue
		}
		acquire := e.Kind == kindLock || e.Kind == kindTry
		switch {
		case acquire && e.Type == evInvoke:
			calls[e.ID] = e.T
		case acquire:
			if start, ok := calls[e.ID]; ok {
				steps[e.Key] = append(steps[e.Key], step{t: start, waited: 1}, step{t: e.T, waited: -1})
				delete(calls, e.ID)
			}
		}
		if e.Owner == "" {
			continue
		}
		m := holds[e.Key]
		if m == nil {
			m = map[string]*hold{}
			holds[e.Key] = m
		}
		g := m[e.Owner]
		switch {
		case acquire && e.Type == evOK:
			m[e.Owner] = &hold{start: e.T, end: e.Deadline}
		case g == nil || g.ended:
		case e.Kind == kindRenew && e.Type == evOK:
			g.end = max(g.end, e.Deadline)
		case (e.Kind == kindUnlock && e.Type == evInvoke) || e.Kind == kindLost:
			g.end, g.ended = min(g.end, e.T), true
		}
	}
	var out gaps
	for _, k := range keys {
		ss := steps[k]
		for _, g := range holds[k] {
			ss = append(ss, step{t: g.start, held: 1}, step{t: max(g.end, g.start), held: -1})
		}
		slices.SortFunc(ss, func(a, b step) int { return cmpInt64(a.t, b.t) })
		held, waited := 0, 0
		idleFrom, blockedFrom := from, int64(-1)
		note := func(t int64) { // the state is about to change at t
			t = min(max(t, from), to)
			if held == 0 && t-idleFrom > out.idle {
				out.idle, out.idleKey = t-idleFrom, k
			}
			if held == 0 && waited > 0 && blockedFrom >= 0 && t-blockedFrom > out.blocked {
				out.blocked, out.blockedKey = t-blockedFrom, k
			}
		}
		for _, s := range ss {
			note(s.t)
			wasIdle, wasBlocked := held == 0, held == 0 && waited > 0
			held, waited = held+s.held, waited+s.waited
			if held == 0 && !wasIdle {
				idleFrom = max(s.t, from)
			}
			if isBlocked := held == 0 && waited > 0; isBlocked && !wasBlocked {
				blockedFrom = max(s.t, from)
			}
		}
		note(to)
	}
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestHolderGaps: on one key, a grant held 0-100 (released at 100), a
// Lock called at 150 that waits until its grant at 400, held to 450 (its
// deadline), and another call from 500 to 520 that fails; the window is
// 0-1000. No holder: 100-400 (300) and 450-1000 (550, the longest); with a
// caller waiting: 150-400 (250) and 500-520.
func TestHolderGaps(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	k := "k"
	ev := []event{
		{Type: evInvoke, ID: 1, Kind: kindLock, Key: k, T: 0},
		{Type: evOK, ID: 1, Kind: kindLock, Key: k, T: 0, Owner: "a", Deadline: ms(900)},
		{Type: evInvoke, ID: 2, Kind: kindUnlock, Key: k, T: ms(100), Owner: "a"},
		{Type: evInvoke, ID: 3, Kind: kindLock, Key: k, T: ms(150)},
		{Type: evOK, ID: 3, Kind: kindLock, Key: k, T: ms(400), Owner: "b", Deadline: ms(450)},
		{Type: evInvoke, ID: 4, Kind: kindTry, Key: k, T: ms(500)},
		{Type: evFail, ID: 4, Kind: kindTry, Key: k, T: ms(520)},
		{Type: evOK, ID: 5, Kind: kindLock, Key: "other", T: ms(10), Owner: "c", Deadline: ms(20)},
	}
	g := holderGaps(ev, []string{k}, 0, ms(1000))
	if g.idle != ms(550) || g.idleKey != k || g.blocked != ms(250) || g.blockedKey != k {
		t.Fatalf("gaps %+v; want idle 550ms, blocked 250ms on %q", g, k)
	}
}
