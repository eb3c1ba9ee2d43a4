package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

var keySeq atomic.Int64

// key returns a key no other test uses (no braces: its fence counter is
// "dlock:{<key>}:fence").
func key(t testing.TB) string {
	return fmt.Sprintf("%s-%d", t.Name(), keySeq.Add(1))
}

func fenceKey(k string) string { return "dlock:{" + k + "}:fence" }

func TestNewErrors(t *testing.T) {
	nodeClient := func(addr string) *redis.Client {
		r := nodeClient(addr)
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	c := func() redis.UniversalClient { return nodeClient("127.0.0.1:1") }
	var nilClient *redis.Client
	for name, nodes := range map[string][]redis.UniversalClient{
		"none":      nil,
		"one":       {c()},
		"even":      {c(), nodeClient("127.0.0.1:2"), nodeClient("127.0.0.1:3"), nodeClient("127.0.0.1:4")},
		"nil":       {c(), nil, nodeClient("127.0.0.1:3")},
		"typed nil": {c(), nilClient, nodeClient("127.0.0.1:3")},
		"duplicate": {c(), nodeClient("127.0.0.1:2"), c()},
	} {
		if _, err := redlock.New(nodes, redlock.Options{}); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	three := []redis.UniversalClient{c(), nodeClient("127.0.0.1:2"), nodeClient("127.0.0.1:3")}
	if _, err := redlock.New(three, redlock.Options{NodeTimeout: -1}); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("negative NodeTimeout: %v", err)
	}
	p, err := redlock.New(three, redlock.Options{})
	if err != nil || p.Quorum() != 2 || p.Nodes() != 3 {
		t.Fatalf("%v, %v", p, err)
	}
}

// TestBasics: a lock is written to every node with one value and a fence
// written back to them; a second caller is refused with the holder's TTL,
// or waits and is woken by the release's publication; Extend and Unlock
// reach every node; Close releases what is held.
func TestBasics(t *testing.T) {
	ctx := t.Context()
	a := newSet(t, shared, redlock.Options{NodeTimeout: 2 * time.Second}, dlock.Options{RetryInterval: 10 * time.Second})
	b := newSet(t, shared, redlock.Options{NodeTimeout: 2 * time.Second}, dlock.Options{RetryInterval: 10 * time.Second})
	k := key(t)
	lk, err := a.c.Lock(ctx, k, dlock.WithProtocol(a.p), dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Lock returns once a majority granted; the third node's grant may
	// still be on its way (within NodeTimeout).
	onNodes := holders(t, shared, k)
	for wait := time.Now().Add(2 * time.Second); count(onNodes, lk.Token()) < 3 && time.Now().Before(wait); onNodes = holders(t, shared, k) {
		if count(onNodes, lk.Token()) < 2 {
			t.Fatalf("nodes hold %q, want %q on a majority at once", onNodes, lk.Token())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if count(onNodes, lk.Token()) != 3 {
		t.Fatalf("nodes hold %q, want %q on all", onNodes, lk.Token())
	}
	if lk.Fence() == 0 || time.Until(lk.Deadline()) > 2*time.Second || time.Until(lk.Deadline()) < time.Second {
		t.Fatalf("fence %d, deadline in %v", lk.Fence(), time.Until(lk.Deadline()))
	}
	if got := holders(t, shared, fenceKey(k)); count(got, strconv.FormatUint(lk.Fence(), 10)) < 2 {
		t.Fatalf("fence %d written back to %q", lk.Fence(), got)
	}

	_, err = b.c.TryLock(ctx, k, dlock.WithProtocol(b.p))
	var na *dlock.NotAcquiredError
	if !errors.As(err, &na) || na.TTL < time.Second || na.TTL > 2*time.Second {
		t.Fatalf("TryLock on a held key: %v", err)
	}

	if err := lk.Extend(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for i, s := range shared {
		if d := s.Client(t).PTTL(ctx, k).Val(); d < 4*time.Second {
			t.Fatalf("node %d: PTTL %v after Extend(5s)", i, d)
		}
	}

	// A waiter is woken by the release: RetryInterval is 10s, so only the
	// publication on nodes[0] can wake it in time.
	got := make(chan *dlock.Lock, 1)
	go func() {
		l2, err := b.c.Lock(ctx, k, dlock.WithProtocol(b.p), dlock.WithTTL(2*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	time.Sleep(300 * time.Millisecond)
	released := time.Now()
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var l2 *dlock.Lock
	select {
	case l2 = <-got:
	case <-time.After(3 * time.Second):
		t.Fatal("waiter not woken by the release")
	}
	if l2 == nil {
		t.FailNow()
	}
	t.Logf("waiter got the lock %v after the release", time.Since(released).Round(time.Millisecond))
	if l2.Fence() <= lk.Fence() {
		t.Fatalf("fence went from %d to %d", lk.Fence(), l2.Fence())
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatalf("second Unlock: %v", err)
	}
	if err := b.c.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l2.Err(), dlock.ErrNotHeld) {
		t.Fatalf("after Close: %v", l2.Err())
	}
	if got := holders(t, shared, k); count(got, "") != 3 {
		t.Fatalf("after Close the nodes hold %q", got)
	}
}

// TestNotAcquired: how a caller that did not win learns how long to wait,
// and that its partial hold is cleaned up at once.
func TestNotAcquired(t *testing.T) {
	ctx := t.Context()
	s := newSet(t, shared, redlock.Options{NodeTimeout: 200 * time.Millisecond, RetryJitter: 30 * time.Millisecond}, dlock.Options{})
	c0, c1 := shared[0].Client(t), shared[1].Client(t)

	// One foreign holder on two nodes blocks a majority until one of its
	// keys expires.
	k := key(t)
	c0.Set(ctx, k, "x", 800*time.Millisecond)
	c1.Set(ctx, k, "x", 1500*time.Millisecond)
	_, err := s.c.TryLock(ctx, k, dlock.WithProtocol(s.p))
	var na *dlock.NotAcquiredError
	if !errors.As(err, &na) || na.TTL < 600*time.Millisecond || na.TTL > 800*time.Millisecond {
		t.Fatalf("blocked by one holder: %v", err)
	}
	if got := holders(t, shared, k); got[2] != "" {
		t.Fatalf("the free node keeps the failed attempt's value: %q", got)
	}

	// Two holders of one node each: a split vote, retried after a jitter.
	k = key(t)
	c0.Set(ctx, k, "x", 10*time.Second)
	c1.Set(ctx, k, "y", 10*time.Second)
	_, err = s.c.TryLock(ctx, k, dlock.WithProtocol(s.p))
	if !errors.As(err, &na) || na.TTL <= 0 || na.TTL > 31*time.Millisecond {
		t.Fatalf("split vote: %v", err)
	}
	if got := holders(t, shared, k); got[2] != "" {
		t.Fatalf("the free node keeps the failed attempt's value: %q", got)
	}

	// Non-strings on a majority: not a lock.
	k = key(t)
	c0.LPush(ctx, k, "x")
	c1.LPush(ctx, k, "x")
	if _, err = s.c.TryLock(ctx, k, dlock.WithProtocol(s.p)); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("wrong type on a majority: %v", err)
	}
}

// guard checks mutual exclusion and fence order among the critical
// sections of one test's contenders, all in this process.
type guard struct {
	mu         sync.Mutex
	inside     int
	lastFence  uint64
	grants     int
	violations []string
	last       time.Time // end of the last critical section
	maxGap     time.Duration
}

func (g *guard) enter(who string, fence uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inside > 0 {
		g.violations = append(g.violations, who+": entered while another holder was inside")
	}
	if fence <= g.lastFence {
		g.violations = append(g.violations, fmt.Sprintf("%s: fence %d after %d", who, fence, g.lastFence))
	}
	if !g.last.IsZero() {
		g.maxGap = max(g.maxGap, time.Since(g.last))
	}
	g.inside++
	g.lastFence = max(g.lastFence, fence)
	g.grants++
}

func (g *guard) leave() {
	g.mu.Lock()
	g.inside--
	g.last = time.Now()
	g.mu.Unlock()
}

func (g *guard) snapshot() (grants int, violations []string, maxGap time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.grants, append([]string(nil), g.violations...), g.maxGap
}

// contend runs workers goroutines per set that lock key in a loop (each
// Lock bounded by a 3s context), until stop is closed. It returns when they
// have all stopped, or fails the test if one hangs.
func contend(t *testing.T, sets []*set, workers int, k string, ttl time.Duration, g *guard, stop chan struct{}, errs *sync.Map) {
	var wg sync.WaitGroup
	for si, s := range sets {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				who := fmt.Sprintf("set%d/w%d", si, w)
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					lk, err := s.c.Lock(ctx, k, dlock.WithProtocol(s.p), dlock.WithTTL(ttl))
					cancel()
					if err != nil {
						n, _ := errs.LoadOrStore(kind(err), new(atomic.Int64))
						n.(*atomic.Int64).Add(1)
						time.Sleep(20 * time.Millisecond)
						continue
					}
					g.enter(who, lk.Fence())
					time.Sleep(3 * time.Millisecond)
					if err := lk.Err(); err != nil {
						t.Errorf("%s: lost inside the critical section: %v", who, err)
					}
					g.leave()
					uctx, ucancel := context.WithTimeout(context.Background(), 2*time.Second)
					_ = lk.Unlock(uctx)
					ucancel()
				}
			}()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	<-stop
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a contender hangs 10s after the stop")
	}
}

func kind(err error) string {
	switch {
	case errors.Is(err, redlock.ErrNoQuorum):
		return "no quorum"
	case errors.Is(err, dlock.ErrContextDone):
		return "context done"
	case errors.Is(err, dlock.ErrUnavailable):
		return "unavailable"
	}
	return err.Error()
}

func errSummary(errs *sync.Map) string {
	s := ""
	errs.Range(func(k, v any) bool {
		s += fmt.Sprintf(" %s=%d", k, v.(*atomic.Int64).Load())
		return true
	})
	return s
}

// TestKillMinorityMidContention: 5 nodes, 6 contenders in 2 "processes".
// Killing 2 nodes (one of them nodes[0], whose pub/sub wakes the waiters)
// while they contend keeps the lock exclusive, fenced in order, and live.
func TestKillMinorityMidContention(t *testing.T) {
	servers := start(t, 5, redistest.Config{})
	opts := redlock.Options{NodeTimeout: 150 * time.Millisecond}
	copts := dlock.Options{RetryInterval: 200 * time.Millisecond}
	sets := []*set{newSet(t, servers, opts, copts), newSet(t, servers, opts, copts)}
	k := key(t)
	g := &guard{}
	var errs sync.Map
	stop := make(chan struct{})
	var before int
	go func() {
		time.Sleep(time.Second)
		before, _, _ = g.snapshot()
		for _, i := range []int{0, 3} {
			if err := servers[i].Kill(); err != nil {
				t.Error(err)
			}
		}
		time.Sleep(2 * time.Second)
		close(stop)
	}()
	contend(t, sets, 3, k, time.Second, g, stop, &errs)
	grants, violations, maxGap := g.snapshot()
	t.Logf("%d grants before the kill, %d after; longest gap between holders %v; errors:%s",
		before, grants-before, maxGap.Round(time.Millisecond), errSummary(&errs))
	if len(violations) > 0 {
		t.Fatalf("violations: %q", violations)
	}
	if before < 5 || grants-before < 5 {
		t.Fatalf("not live: %d grants before the kill, %d after", before, grants-before)
	}
	if got := holders(t, servers, k); count(got, "")+count(got, "down") != 5 {
		t.Fatalf("after the contenders stopped, nodes hold %q", got)
	}
}

// TestKillMajority: with 3 of 5 nodes killed, the holder learns it lost the
// lock by its deadline (ErrUnreachable), a waiter's Lock fails with a clear
// error well before its context's deadline, and nothing is held afterwards.
func TestKillMajority(t *testing.T) {
	servers := start(t, 5, redistest.Config{})
	// A node timeout and a TTL that a loaded machine's stalls do not
	// exhaust: with 100ms and 600ms, the first Lock or a renewal before
	// the kill failed on the machine's speed.
	opts := redlock.Options{NodeTimeout: 500 * time.Millisecond}
	a := newSet(t, servers, opts, dlock.Options{})
	b := newSet(t, servers, opts, dlock.Options{RetryInterval: 300 * time.Millisecond})
	k := key(t)
	ttl := 3 * time.Second
	lk, err := a.c.Lock(t.Context(), k, dlock.WithProtocol(a.p), dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	waiter := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := b.c.Lock(ctx, k, dlock.WithProtocol(b.p), dlock.WithTTL(ttl))
		if err == nil {
			_ = l.Unlock(ctx)
		}
		waiter <- err
	}()
	for r0 := a.c.Stats().Renewals; a.c.Stats().Renewals < r0+2; { // a renewal or two
		time.Sleep(20 * time.Millisecond)
	}
	if err := lk.Err(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	deadline := lk.Deadline()
	for _, i := range []int{1, 2, 4} {
		if err := servers[i].Kill(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-lk.Done():
	case <-time.After(ttl + 10*time.Second):
		t.Fatal("holder not told it lost the lock")
	}
	t.Logf("holder lost the lock %v after the kill (deadline was %v after it): %v",
		time.Since(killed).Round(time.Millisecond), deadline.Sub(killed).Round(time.Millisecond), lk.Err())
	if !errors.Is(lk.Err(), dlock.ErrLost) || !errors.Is(lk.Err(), dlock.ErrUnreachable) {
		t.Fatalf("holder: %v", lk.Err())
	}
	select {
	case err := <-waiter:
		t.Logf("waiter: %v", err)
		if !errors.Is(err, dlock.ErrUnavailable) || !errors.Is(err, redlock.ErrNoQuorum) {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waiter still waiting")
	}
	// The holder's Unlock deletes its keys where it still can: a Lock
	// that finds the key held on the live nodes waits for it, as it
	// should, so the next check starts from a free key.
	if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrUnreachable) {
		t.Fatalf("Unlock after the loss: %v", err)
	}
	// Without a majority, Lock fails with a quorum error, not its
	// context's: it does not wait for nodes that are gone.
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err = b.c.Lock(ctx, k, dlock.WithProtocol(b.p))
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || qe.Answered > 2 || qe.Quorum != 3 || ctx.Err() != nil {
		t.Fatalf("Lock without a majority: %v after %v", err, time.Since(start))
	}
	t.Logf("Lock without a majority fails after %v: %v", time.Since(start).Round(time.Millisecond), err)
	for _, i := range []int{1, 2, 4} {
		if err := servers[i].Restart(); err != nil {
			t.Fatal(err)
		}
	}
	// A restarted server may refuse a first connection for a moment on a
	// busy machine ("down"): read until every node answers.
	got := holders(t, servers, k)
	for end := time.Now().Add(3 * time.Second); count(got, "down") > 0 && time.Now().Before(end); got = holders(t, servers, k) {
		time.Sleep(50 * time.Millisecond)
	}
	if count(got, "") != 5 {
		t.Fatalf("nodes hold %q", got)
	}
}

// TestRestartWithoutPersistence: the documented precondition. A node of the
// holder's bare majority restarts at once without its data: a second
// client assembles a majority while the first still holds the lock, a
// safety violation, constructed deterministically and asserted.
func TestRestartWithoutPersistence(t *testing.T) {
	servers := start(t, 5, redistest.Config{})
	opts := redlock.Options{NodeTimeout: 100 * time.Millisecond}
	a := newSet(t, servers, opts, dlock.Options{})
	k := key(t)
	servers[3].Kill()
	servers[4].Kill()
	la, err := a.c.Lock(t.Context(), k, dlock.WithProtocol(a.p), dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Node 2, in A's bare majority {0,1,2}, restarts at once and empty;
	// 3 and 4 come back (empty too).
	for _, i := range []int{2, 3, 4} {
		if err := servers[i].Restart(); err != nil {
			t.Fatal(err)
		}
	}
	b := newSet(t, servers, opts, dlock.Options{})
	lb, err := b.c.TryLock(t.Context(), k, dlock.WithProtocol(b.p), dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("expected the violation, got %v", err)
	}
	if la.Err() != nil || time.Now().After(la.Deadline()) {
		t.Fatalf("A no longer holds: %v", la.Err())
	}
	t.Logf("VIOLATION (expected): A (fence %d, valid %v more) and B (fence %d) hold %q at once; nodes: %q",
		la.Fence(), time.Until(la.Deadline()).Round(time.Millisecond), lb.Fence(), k, holders(t, servers, k))
	// Fencing still orders them: B's token, drawn from the restarted
	// nodes' clocks, is above A's, so a fenced resource rejects A from
	// B's first write on.
	if lb.Fence() <= la.Fence() {
		t.Fatalf("B's fence %d not above A's %d", lb.Fence(), la.Fence())
	}
	// A finds out at its next renewal.
	if err := la.Extend(t.Context(), 10*time.Second); !errors.Is(err, dlock.ErrTaken) {
		t.Fatalf("A's renewal after the violation: %v", err)
	}
}

// TestDelayedRestart: the same node stays down for longer than the TTL
// before it restarts empty. The holder, now without a majority, cannot
// renew and gives the lock up by its deadline; the next holder comes after.
func TestDelayedRestart(t *testing.T) {
	servers := start(t, 5, redistest.Config{})
	opts := redlock.Options{NodeTimeout: 100 * time.Millisecond}
	a := newSet(t, servers, opts, dlock.Options{})
	k := key(t)
	ttl := 800 * time.Millisecond
	servers[3].Kill()
	servers[4].Kill()
	la, err := a.c.Lock(t.Context(), k, dlock.WithProtocol(a.p), dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	servers[2].Kill()
	time.Sleep(ttl + 100*time.Millisecond) // the delayed restart: down for longer than the TTL
	for _, i := range []int{2, 3, 4} {
		if err := servers[i].Restart(); err != nil {
			t.Fatal(err)
		}
	}
	b := newSet(t, servers, opts, dlock.Options{})
	bStart := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	lb, err := b.c.Lock(ctx, k, dlock.WithProtocol(b.p), dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Done():
	default:
		t.Fatal("A still believes it holds the lock")
	}
	if !la.Deadline().Before(bStart) {
		t.Fatalf("A's validity (until %v after the crash) overlaps B's acquire (%v after)",
			la.Deadline().Sub(crashed), bStart.Sub(crashed))
	}
	t.Logf("no overlap: A (fence %d) valid until %v after the crash, lost: %v; B (fence %d) acquired from %v",
		la.Fence(), la.Deadline().Sub(crashed).Round(time.Millisecond), la.Err(), lb.Fence(), bStart.Sub(crashed).Round(time.Millisecond))
	if !errors.Is(la.Err(), dlock.ErrUnreachable) {
		t.Fatalf("A: %v", la.Err())
	}
	if lb.Fence() <= la.Fence() {
		t.Fatalf("fence went from %d to %d", la.Fence(), lb.Fence())
	}
}

// TestRotatingMajorities: successive grants on different majorities (the
// others paused, or killed and restarted with their data) get strictly
// increasing fencing tokens. The first two rounds are the counter-example
// of the naive "max of per-node counters": node 0 alone has a high counter.
func TestRotatingMajorities(t *testing.T) {
	servers := start(t, 5, redistest.Config{AOF: "always"})
	s := newSet(t, servers, redlock.Options{NodeTimeout: 150 * time.Millisecond}, dlock.Options{})
	ctx := t.Context()
	k := key(t)
	now, err := servers[0].Client(t).Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	high := uint64(now.UnixMicro()) + 1e12
	servers[0].Client(t).Set(ctx, fenceKey(k), high, time.Minute)

	grant := func(down []int, pause bool) uint64 {
		t.Helper()
		for _, i := range down {
			var err error
			if pause {
				err = servers[i].Pause()
			} else {
				err = servers[i].Kill()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		lk, err := s.c.TryLock(ctx, k, dlock.WithProtocol(s.p), dlock.WithTTL(time.Second))
		if err != nil {
			t.Fatalf("without %v: %v", down, err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatalf("without %v: %v", down, err)
		}
		for _, i := range down {
			var err error
			if pause {
				err = servers[i].Resume()
			} else {
				err = servers[i].Restart()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		// A paused node runs the acquire it received when it resumes,
		// after the Unlock gave up on it; the Unlock's retries delete it.
		waitClean(t, servers, k, 3*time.Second)
		return lk.Fence()
	}

	f1 := grant([]int{3, 4}, true) // majority {0,1,2}: max is node 0's
	if f1 != high+1 {
		t.Fatalf("first fence %d, want %d", f1, high+1)
	}
	if v := servers[2].Client(t).Get(ctx, fenceKey(k)).Val(); v != strconv.FormatUint(f1, 10) {
		t.Fatalf("fence not written back to node 2: %q", v)
	}
	f2 := grant([]int{0, 1}, true) // majority {2,3,4}: only node 2 saw f1
	if f2 <= f1 {
		t.Fatalf("fence went back from %d to %d on another majority", f1, f2)
	}
	fences := []uint64{f1, f2}
	for r := range 8 {
		down := []int{(r + 2) % 5, (r + 4) % 5}
		f := grant(down, r%2 == 0)
		if f <= fences[len(fences)-1] {
			t.Fatalf("round %d without %v: fence %d after %d", r, down, f, fences[len(fences)-1])
		}
		fences = append(fences, f)
	}
	t.Logf("fences: %v", fences)
}

// waitClean waits until no server holds k, at most d.
func waitClean(t *testing.T, servers []*redistest.Server, k string, d time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		got := holders(t, servers, k)
		if count(got, "") == len(servers) {
			if e := time.Since(start); e > 10*time.Millisecond {
				t.Logf("nodes clean %v later", e.Round(time.Millisecond))
			}
			return
		}
		if time.Since(start) > d {
			t.Fatalf("nodes still hold %q after %v", got, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatchdog: the Client's watchdog keeps a Redlock alive for several
// TTLs, renewing it on every node, and reports the loss (ErrUnreachable)
// when a majority is killed.
func TestWatchdog(t *testing.T) {
	servers := start(t, 5, redistest.Config{})
	s := newSet(t, servers, redlock.Options{NodeTimeout: 150 * time.Millisecond}, dlock.Options{})
	k := key(t)
	ttl := 600 * time.Millisecond
	lk, err := s.c.Lock(t.Context(), k, dlock.WithProtocol(s.p), dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * ttl)
	if err := lk.Err(); err != nil {
		t.Fatalf("lost under the watchdog: %v", err)
	}
	if got := holders(t, servers, k); count(got, lk.Token()) != 5 {
		t.Fatalf("nodes hold %q", got)
	}
	if st := s.c.Stats(); st.Renewals < 10 {
		t.Fatalf("%d renewals in 5 TTLs", st.Renewals)
	}
	servers[0].Kill() // a minority: still renewed
	time.Sleep(2 * ttl)
	if err := lk.Err(); err != nil {
		t.Fatalf("lost with 4 of 5 nodes up: %v", err)
	}
	killed := time.Now()
	servers[1].Kill()
	servers[2].Kill()
	select {
	case <-lk.Done():
	case <-time.After(2 * ttl):
		t.Fatal("loss not reported")
	}
	t.Logf("loss reported %v after the majority was killed: %v", time.Since(killed).Round(time.Millisecond), lk.Err())
	if !errors.Is(lk.Err(), dlock.ErrLost) || !errors.Is(lk.Err(), dlock.ErrUnreachable) || !errors.Is(lk.Err(), redlock.ErrNoQuorum) {
		t.Fatalf("loss cause: %v", lk.Err())
	}
}

// TestLostByExpiry: when a majority of the keys are gone (here: deleted
// behind the holder's back), the next renewal reports the loss as
// ErrExpired and deletes what is left.
func TestLostByExpiry(t *testing.T) {
	servers := start(t, 3, redistest.Config{})
	s := newSet(t, servers, redlock.Options{NodeTimeout: 2 * time.Second}, dlock.Options{})
	k := key(t)
	lk, err := s.c.Lock(t.Context(), k, dlock.WithProtocol(s.p), dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	servers[0].Client(t).Del(t.Context(), k)
	servers[1].Client(t).Set(t.Context(), k, "other", time.Minute)
	if err := lk.Extend(t.Context(), time.Second); !errors.Is(err, dlock.ErrTaken) {
		t.Fatalf("Extend: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // the clean-up runs in the background
	if got := holders(t, servers, k); got[2] != "" {
		t.Fatalf("the lost lock's last key was not deleted: %q", got)
	}
}

// TestSlowNodesCleanup: an attempt whose requests to a majority time out
// (paused nodes) fails with ErrNoQuorum and leaves nothing behind once the
// nodes come back.
func TestSlowNodesCleanup(t *testing.T) {
	servers := start(t, 3, redistest.Config{})
	s := newSet(t, servers, redlock.Options{NodeTimeout: 100 * time.Millisecond}, dlock.Options{})
	k := key(t)
	servers[1].Pause()
	servers[2].Pause()
	start := time.Now()
	_, err := s.c.TryLock(t.Context(), k, dlock.WithProtocol(s.p), dlock.WithTTL(5*time.Second))
	if !errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryLock with 2 of 3 nodes paused: %v", err)
	}
	t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if got := holders(t, servers[:1], k); got[0] != "" {
		t.Fatalf("node 0 keeps the failed attempt's key: %q", got)
	}
	servers[1].Resume()
	servers[2].Resume()
	deadline := time.Now().Add(2 * time.Second)
	for {
		got := holders(t, servers, k)
		if count(got, "") == 3 {
			t.Logf("clean %v after the nodes resumed", time.Since(deadline.Add(-2*time.Second)).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2s after the nodes resumed they hold %q", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// One server given twice, under two addresses (127.0.0.1 and localhost),
// would make one server count twice towards a majority: it is refused by
// its identity (INFO server run_id), at CheckServers, and by Lock as soon
// as both addresses have answered (a grant before that was taken on a
// majority of distinct servers).
func TestSameServerTwice(t *testing.T) {
	ctx := t.Context()
	s := shared[0]
	alias := "localhost:" + strconv.Itoa(s.Port)
	var nodes []redis.UniversalClient
	for _, addr := range []string{s.Addr(), alias, shared[1].Addr()} {
		n := nodeClient(addr)
		defer n.Close()
		nodes = append(nodes, n)
	}
	c, p, err := redlock.NewClient(nodes, redlock.Options{NodeTimeout: time.Second}, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k := key(t)
	var se *redlock.SameServerError
	for i := 0; ; i++ {
		lk, err := c.TryLock(ctx, k, dlock.WithProtocol(p))
		if err == nil {
			if i >= 20 {
				t.Fatal("20 locks granted on one server given twice")
			}
			// The server given twice answers the SET twice (the second as
			// a retried request of the same value), so the grant can come
			// before the third node answers. Unlock once that node holds
			// the value too: a SET that lands after the Unlock's delete
			// would stay until its TTL (a limit doc.go states).
			for end := time.Now().Add(5 * time.Second); holders(t, shared, k)[1] != lk.Token() && time.Now().Before(end); {
				time.Sleep(5 * time.Millisecond)
			}
			_ = lk.Unlock(ctx)
			continue
		}
		if !errors.Is(err, redlock.ErrSameServer) || !errors.Is(err, dlock.ErrInvalidArgument) || !errors.As(err, &se) ||
			se.I != 0 || se.J != 1 {
			t.Fatalf("TryLock with one server twice: %v; want a SameServerError for nodes 0 and 1", err)
		}
		break
	}
	if got := holders(t, shared, k); count(got, "") != len(shared) {
		t.Errorf("nodes hold %q after the refused lock; want nothing", got)
	}

	// CheckServers finds it at once.
	c2, p2, err := redlock.NewClient(nodes, redlock.Options{}, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := p2.CheckServers(ctx); !errors.As(err, &se) {
		t.Errorf("CheckServers: %v", err)
	}
	// Three distinct servers pass.
	ok := newSet(t, shared, redlock.Options{}, dlock.Options{})
	if err := ok.p.CheckServers(ctx); err != nil {
		t.Errorf("CheckServers of distinct servers: %v", err)
	}
}
