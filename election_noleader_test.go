package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// observer returns the next event of ch, failing the test if none comes
// within wait.
func nextObserved(t *testing.T, ch <-chan dlock.LeaderInfo, wait time.Duration) dlock.LeaderInfo {
	t.Helper()
	select {
	case li, ok := <-ch:
		if !ok {
			t.Fatal("the observer's channel closed")
		}
		return li
	case <-time.After(wait):
		t.Fatalf("nothing observed within %v", wait)
	}
	return dlock.LeaderInfo{}
}

// nobodyFirst checks that an observer started on an election nobody leads
// says so first.
func nobodyFirst(t *testing.T, ch <-chan dlock.LeaderInfo) {
	t.Helper()
	if li := nextObserved(t, ch, 20*time.Second); li != (dlock.LeaderInfo{NoLeader: true}) {
		t.Fatalf("first observed %+v on an election nobody leads, want NoLeader", li)
	}
}

// noMore checks that ch delivers nothing for a few poll intervals.
func noMore(t *testing.T, ch <-chan dlock.LeaderInfo, d time.Duration) {
	t.Helper()
	select {
	case li := <-ch:
		t.Fatalf("observed %+v, want nothing more", li)
	case <-time.After(d):
	}
}

// After the last leader resigns, an observer is told that nobody leads,
// once; the next leader is delivered as before.
func TestObserveNoLeaderAfterResign(t *testing.T) {
	ctx := t.Context()
	oc, _ := newClient(t, dlock.Options{})
	lc, _ := newClient(t, dlock.Options{})
	name := key(t)
	opts := dlock.ElectionOptions{TTL: 10 * time.Second, PollInterval: 50 * time.Millisecond}
	ch := newElection(t, oc, name, opts).Observe(ctx)
	nobodyFirst(t, ch)
	el := newElection(t, lc, name, opts)
	a, err := el.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if li := nextObserved(t, ch, 20*time.Second); li.Value != "a" || li.Term != a.Term() || li.NoLeader {
		t.Fatalf("observed %+v, want a", li)
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if li := nextObserved(t, ch, 20*time.Second); li != (dlock.LeaderInfo{NoLeader: true}) {
		t.Fatalf("observed %+v after the resignation, want NoLeader", li)
	}
	noMore(t, ch, 300*time.Millisecond) // six polls: still nobody, said once
	b, err := el.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Resign(ctx)
	if li := nextObserved(t, ch, 20*time.Second); li.Value != "b" || li.Term != b.Term() || li.NoLeader || b.Term() <= a.Term() {
		t.Fatalf("observed %+v, want b (term %d, above a's %d)", li, b.Term(), a.Term())
	}
}

// A leader whose lease runs out (its process killed) with nobody waiting
// leaves no leader: the observer is told, once the lock's key expired.
func TestObserveNoLeaderAfterExpiry(t *testing.T) {
	ctx := t.Context()
	oc, _ := newClient(t, dlock.Options{})
	name := key(t)
	ch := newElection(t, oc, name, dlock.ElectionOptions{TTL: 10 * time.Second, PollInterval: 50 * time.Millisecond}).Observe(ctx)
	nobodyFirst(t, ch)
	a := startCandidate(t, name, "a", time.Second)
	la, _ := a.until(t, "leading", 20*time.Second)
	if li := nextObserved(t, ch, 20*time.Second); li.Value != "a" || li.Term != termOf(t, la) {
		t.Fatalf("observed %+v, want a (%s)", li, la)
	}
	killed := a.crash(t)
	if li := nextObserved(t, ch, 20*time.Second); li != (dlock.LeaderInfo{NoLeader: true}) {
		t.Fatalf("observed %+v after the leader's lease ran out, want NoLeader", li)
	}
	// Not before the lease could have run out (the kill came after the
	// last renewal, and the lease is 1s from that renewal).
	if d := time.Since(killed); d < 300*time.Millisecond {
		t.Fatalf("NoLeader %v after the kill, before a 1s lease renewed every 333ms could run out", d)
	}
	b, err := newElection(t, oc, name, dlock.ElectionOptions{TTL: 10 * time.Second}).Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Resign(ctx)
	if li := nextObserved(t, ch, 20*time.Second); li.Value != "b" || li.Term != b.Term() || li.NoLeader {
		t.Fatalf("observed %+v, want b", li)
	}
}

// A resignation handed straight to a queued candidate leaves no gap: the
// observer gets the next leader and no NoLeader, even while the next
// leader has the lock but has not published itself yet.
func TestObserveNoNoLeaderOnHandoff(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c, rdb := newClient(t, dlock.Options{})
	name := key(t)
	opts := dlock.ElectionOptions{TTL: 10 * time.Second, PollInterval: 20 * time.Millisecond}
	ch := newElection(t, c, name, opts).Observe(ctx)
	nobodyFirst(t, ch)
	el := newElection(t, c, name, opts)
	a, err := el.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if li := nextObserved(t, ch, 20*time.Second); li.Value != "a" {
		t.Fatalf("observed %+v, want a", li)
	}
	// The lock alone, held by another token while the head record is a's:
	// a candidate that has the lock and has not published yet.
	rdb.Set(ctx, name, "0123456789abcdef0123456789abcdef", time.Minute)
	noMore(t, ch, 200*time.Millisecond) // ten polls, none says nobody leads
	rdb.Del(ctx, name)
	if li := nextObserved(t, ch, 20*time.Second); !li.NoLeader {
		t.Fatalf("observed %+v once the lock was free, want NoLeader", li)
	}
	_ = a.Resign(ctx) // lost already
	b, err := el.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if li := nextObserved(t, ch, 20*time.Second); li.Value != "b" {
		t.Fatalf("observed %+v, want b", li)
	}
	got := make(chan *dlock.Leadership, 1)
	go func() {
		l, err := el.Campaign(ctx, "c")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitCandidates(t, c, rdb, name, 1)
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	cl := <-got
	if cl == nil {
		t.FailNow()
	}
	defer cl.Resign(ctx)
	if li := nextObserved(t, ch, 20*time.Second); li.Value != "c" || li.Term != cl.Term() {
		t.Fatalf("observed %+v after a hand-off, want c", li)
	}
	noMore(t, ch, 200*time.Millisecond)
}

// An observer that starts on an election never held says nobody leads,
// once, then delivers the first leader when one is elected.
func TestObserveNoLeaderAtStart(t *testing.T) {
	ctx := t.Context()
	oc, _ := newClient(t, dlock.Options{})
	lc, _ := newClient(t, dlock.Options{})
	name := key(t)
	opts := dlock.ElectionOptions{TTL: 10 * time.Second, PollInterval: 50 * time.Millisecond}
	ch := newElection(t, oc, name, opts).Observe(ctx)
	nobodyFirst(t, ch)
	noMore(t, ch, 300*time.Millisecond) // six polls: still nobody, said once
	a, err := newElection(t, lc, name, opts).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Resign(ctx)
	if li := nextObserved(t, ch, 20*time.Second); li.Value != "a" || li.Term != a.Term() || li.NoLeader {
		t.Fatalf("observed %+v, want a", li)
	}
}

// An observer that starts while a leader leads delivers that leader
// first, and no NoLeader.
func TestObserveLeaderAtStart(t *testing.T) {
	ctx := t.Context()
	oc, _ := newClient(t, dlock.Options{})
	lc, _ := newClient(t, dlock.Options{})
	name := key(t)
	opts := dlock.ElectionOptions{TTL: 10 * time.Second, PollInterval: 50 * time.Millisecond}
	a, err := newElection(t, lc, name, opts).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Resign(ctx)
	ch := newElection(t, oc, name, opts).Observe(ctx)
	if li := nextObserved(t, ch, 20*time.Second); li.Value != "a" || li.Term != a.Term() || li.NoLeader {
		t.Fatalf("first observed %+v while a leads, want a", li)
	}
	noMore(t, ch, 300*time.Millisecond)
}

// An observer that starts while a candidate holds the lock but has not
// published itself says nothing until it knows: that nobody leads, once
// the lock is freed without a record.
func TestObserveNoLeaderAfterPendingStart(t *testing.T) {
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{})
	name := key(t)
	opts := dlock.ElectionOptions{TTL: 10 * time.Second, PollInterval: 50 * time.Millisecond}
	rdb.Set(ctx, name, "0123456789abcdef0123456789abcdef", time.Minute)
	ch := newElection(t, c, name, opts).Observe(ctx)
	noMore(t, ch, 300*time.Millisecond) // six polls: a candidate holds the lock
	rdb.Del(ctx, name)
	nobodyFirst(t, ch)
	noMore(t, ch, 300*time.Millisecond)
}
