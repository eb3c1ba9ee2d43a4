package faults

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/legacy"
)

// The named scenarios of the lost, late and reordered replies class: each
// aims a command fault or an engine pause at the step where a defect of
// that class lived, under contention, and leaves the verdict to the
// checker. They are the suite-level counterparts of the unit regression
// tests; each would have caught its defect.

// TestDefects runs the named scenarios.
func TestDefects(t *testing.T) {
	for _, sc := range defectScenarios() {
		t.Run(sc.topo+"/"+sc.name, func(t *testing.T) { runScenario(t, sc, sc.rounds) })
	}
}

func defectScenarios() []scenario {
	const single = "single"
	return []scenario{
		{topo: single, name: "withdraw lands after the retry", rounds: 2, run: withdrawAfterRetry,
			note: "a confirm's reply lost; the clean-up held until the retry (same token) completed; a waiter behind"},
		{topo: single, name: "legacy lost SETNX reply", rounds: 2, run: legacyLostSetnx,
			note: "legacy (seconds): B holds; A's SETNX in the same second, reply lost; C contends"},
		{topo: single, name: "legacy batched renewal", rounds: 1, run: legacyBatchedRenewal,
			note: "legacy (ms), 4 locks on one Client, TTL 300ms; one is Extended with its command delayed 150ms"},
		{topo: single, name: "late confirm: lock", rounds: 1, run: lateConfirm(exclusiveSpec()),
			note: "one hand-off's confirm paused 450ms (PickupTimeout 200ms), 4 waiters cycling: every Lock in bounded time"},
		{topo: single, name: "late confirm: semaphore", rounds: 1, run: lateConfirm(semSpec(1, 1)),
			note: "the same on a semaphore of 1"},
		{topo: single, name: "late confirm: readers", rounds: 1, run: lateConfirm(sharedSpec()),
			note: "the same with readers and writers"},
		{topo: single, name: "retried Unlock after lost reply", rounds: 2, run: retriedUnlock,
			note: "FIFO waiter queued; the release's reply lost; the holder retries Unlock"},
		{topo: single, name: "kill -9 every client: keys expire", rounds: 1, run: killEverything,
			note: "plain, read, semaphore, reentrant: a holder and 2 queued waiters each, all SIGKILLed; DBSIZE back to 0"},
		{topo: single, name: "Counter: Unlock error after the sale", rounds: 1, run: counterUnlockErrors,
			note: "Counter sales with 30% of segment releases' replies lost: sold + left never above the stock"},
		{topo: single, name: "admin release of a semaphore", rounds: 1, run: adminSemaphore,
			note: "semaphore of 2, 4 holders under a stored limit of 4, removed; 2 queue; ReleaseToken, ForceRelease"},
	}
}

// waitQueued waits until k's queue has n waiters, at most 20s: the waiters
// may be child processes, and a race-enabled test binary can take seconds
// to start on a loaded machine.
func (h *harness) waitQueued(k string, n int64) {
	h.t.Helper()
	direct := h.client(h.lock.Addr(), true)
	for end := time.Now().Add(20 * time.Second); direct.LLen(h.t.Context(), "dlock:{"+k+"}:q").Val() < n; sleep(time.Millisecond) {
		if time.Now().After(end) {
			h.t.Fatalf("fewer than %d waiters queued on %s", n, k)
		}
	}
}

// withdrawAfterRetry: D holds k; A (through the fault layer) and C queue
// behind it. D releases: A is handed the key, its confirm runs but the
// reply is lost; A's clean-up (a withdraw of its token) is held until A's
// next acquire has completed. If the retry reuses the token, it is
// granted, and the withdraw then frees the key under A for C.
func withdrawAfterRetry(h *harness) {
	ctx := h.t.Context()
	k := h.key("k")
	opts := dlock.Options{WaiterLease: 30 * time.Second} // no queue refresh during the run
	na, inj := h.cmdNode(opts)
	d := h.worker(h.lockNode(opts), true)
	a := h.worker(na, true)
	c := h.worker(h.lockNode(opts), true)
	ld := d.Acquire(ctx, k, 2*time.Second, false)
	if ld == nil {
		h.t.Fatal("D could not acquire")
	}
	var wg sync.WaitGroup
	wg.Go(func() { a.Cycle(ctx, k, 2*time.Second, 5*time.Second, 4, 50*time.Millisecond) })
	h.waitQueued(k, 1)
	wg.Go(func() { c.Cycle(ctx, k, 2*time.Second, 5*time.Second, 2, 20*time.Millisecond) })
	h.waitQueued(k, 2)
	inj.Add(faultcmd.Rule{Name: "confirm reply lost", Action: faultcmd.DropReply,
		Match: faultcmd.Match{Script: "acquire", Key: k}})
	inj.Add(faultcmd.Rule{Name: "withdraw after the retry", Action: faultcmd.Hold,
		Match: faultcmd.Match{Script: "release", Key: k}, Until: faultcmd.Match{Script: "acquire", Key: k},
		HoldTimeout: time.Second})
	d.Work(ctx, ld, 1, 0)
	_ = d.Release(ctx, ld)
	wg.Wait()
}

// legacyLostSetnx: in one second, B takes a legacy (seconds) lock and A's
// SETNX on it fails on the server with its reply lost: A's value equals
// B's. A's clean-up must not delete B's lock; C keeps trying meanwhile.
func legacyLostSetnx(h *harness) {
	ctx := h.t.Context()
	k := h.key("k")
	mk := func(n *node) *worker {
		w := h.worker(n, false)
		w.LockOpts = []dlock.LockOption{dlock.WithProtocol(legacy.New(legacy.Options{Unit: legacy.Seconds}))}
		w.Unique, w.Res = true, nil
		return w
	}
	na, inj := h.cmdNode(dlock.Options{})
	a, b, c := mk(na), mk(h.lockNode(dlock.Options{})), mk(h.lockNode(dlock.Options{}))
	inj.Add(faultcmd.Rule{Name: "SETNX reply lost", Action: faultcmd.DropReply, Match: faultcmd.Match{Cmd: "setnx", Key: k}})
	// Start early in a second, so B's and A's values are equal.
	now := time.Now()
	sleep(now.Truncate(time.Second).Add(time.Second + 20*time.Millisecond).Sub(now))
	lb := b.Acquire(ctx, k, 2*time.Second, false)
	if lb == nil {
		h.t.Fatal("B could not acquire")
	}
	actx, cancel := context.WithTimeout(ctx, time.Second)
	if la := a.Acquire(actx, k, 2*time.Second, false); la != nil {
		_ = a.Release(ctx, la)
	}
	cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		for end := time.Now().Add(600 * time.Millisecond); time.Now().Before(end); sleep(20 * time.Millisecond) {
			if lc := c.Acquire(ctx, k, 2*time.Second, false); lc != nil {
				sleep(50 * time.Millisecond)
				_ = c.Release(ctx, lc)
				return
			}
		}
	})
	sleep(400 * time.Millisecond) // B works
	_ = b.Release(ctx, lb)
	wg.Wait()
}

// legacyBatchedRenewal: one Client holds four legacy (ms) locks with
// renewal; one of them is Extended over and over, its command delayed
// 150ms, so the watchdog's batch waits for it. B takes any of the others
// the moment its stored timestamp passes. Deadline() must not outlive it.
func legacyBatchedRenewal(h *harness) {
	ctx := h.t.Context()
	p := dlock.WithProtocol(legacy.New(legacy.Options{Unit: legacy.Milliseconds}))
	na, inj := h.cmdNode(dlock.Options{})
	a := h.worker(na, false)
	a.LockOpts, a.Unique, a.Res = []dlock.LockOption{p}, true, nil
	b := h.worker(h.lockNode(dlock.Options{}), false)
	b.LockOpts, b.Unique, b.Res = []dlock.LockOption{p}, true, nil
	const ttl = 300 * time.Millisecond
	keys := []string{h.key("k0"), h.key("k1"), h.key("k2"), h.key("k3")}
	var lks []*dlock.Lock
	for _, k := range keys {
		if lk := a.Acquire(ctx, k, ttl, false); lk != nil {
			lks = append(lks, lk)
		}
	}
	if len(lks) < 2 {
		h.t.Fatal("A could not acquire its locks")
	}
	inj.Add(faultcmd.Rule{Name: "slow Extend", Action: faultcmd.Delay, Delay: 150 * time.Millisecond, Times: -1,
		Match: faultcmd.Match{Key: lks[0].Key(), Func: func(c faultcmd.Command) bool { return !c.Pipeline && (c.Name == "evalsha" || c.Name == "fcall") }}})
	stop := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	wg.Go(func() {
		for time.Now().Before(stop) && lks[0].Err() == nil {
			_ = lks[0].Extend(ctx, ttl)
		}
	})
	for _, k := range keys[1:] {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if lb := b.Acquire(ctx, k, ttl, false); lb != nil {
					sleep(20 * time.Millisecond)
					_ = b.Release(ctx, lb)
				}
				sleep(5 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	for _, lk := range lks {
		_ = a.Release(ctx, lk)
	}
}

// lateConfirm: four workers cycle on one key (holds of 30ms) while the
// first hand-off confirm after the warm-up is paused 450ms, past the
// PickupTimeout of 200ms. Every Lock must get the lock in bounded time:
// a waiter whose hand-off lapsed must be back in the queue, not orphaned.
func lateConfirm(spec grantSpec) func(h *harness) {
	return func(h *harness) {
		ctx := h.t.Context()
		k := h.key("k")
		opts := dlock.Options{PickupTimeout: 200 * time.Millisecond, WaiterLease: 900 * time.Millisecond}
		nodes := []*node{h.lockNode(opts), h.lockNode(opts)}
		// Contention lasts well past the bound: an orphaned waiter gets in
		// only once the others stop.
		const bound = 2 * time.Second
		stop := time.Now().Add(300*time.Millisecond + bound + 1200*time.Millisecond)
		var armed, fired atomic.Bool
		restore := probe.Set(func(name, key string) {
			if name == probe.BeforeConfirm && key == k && armed.Load() && fired.CompareAndSwap(false, true) {
				h.nem.Span(kindPause, -1, "confirm paused 450ms", clock.Now(), clock.Now()+int64(450*time.Millisecond))
				time.Sleep(450 * time.Millisecond)
			}
		})
		defer restore()
		var worst atomic.Int64
		var wg sync.WaitGroup
		for i := range 4 {
			w := h.worker(nodes[i%2], true)
			s := spec
			if spec.Mode == modeShared && i%2 == 1 {
				s = exclusiveSpec() // readers and writers alternate
			}
			wg.Go(func() {
				for time.Now().Before(stop) && ctx.Err() == nil {
					start := time.Now()
					if !w.CycleSpec(ctx, k, s, time.Second, 5*time.Second, 2, 30*time.Millisecond) {
						worst.Store(max(worst.Load(), int64(5*time.Second)))
						continue
					}
					worst.Store(max(worst.Load(), int64(time.Since(start))))
				}
			})
		}
		sleep(300 * time.Millisecond)
		armed.Store(true)
		wg.Wait()
		if !fired.Load() {
			h.t.Error("fault not shown: no hand-off confirm was paused")
		}
		h.mu.Lock()
		if d := time.Duration(worst.Load()); d > bound {
			h.extra.add(invL2, 1, "%s: a waiter waited %v under steady contention (bound %v) after a hand-off's confirm came late",
				k, d.Round(time.Millisecond), bound)
		}
		h.mu.Unlock()
	}
}

// retriedUnlock: A holds, W is queued; A's release runs (handing the key
// to W) but its reply is lost, and A retries Unlock. The retry must not
// fail or report a loss: the release succeeded.
func retriedUnlock(h *harness) {
	ctx := h.t.Context()
	k := h.key("k")
	na, inj := h.cmdNode(dlock.Options{})
	a := h.worker(na, true)
	w := h.worker(h.lockNode(dlock.Options{}), true)
	la := a.Acquire(ctx, k, time.Second, false)
	if la == nil {
		h.t.Fatal("A could not acquire")
	}
	var wg sync.WaitGroup
	wg.Go(func() { w.Cycle(ctx, k, time.Second, 5*time.Second, 1, 20*time.Millisecond) })
	h.waitQueued(k, 1)
	a.Work(ctx, la, 1, 0)
	inj.Add(faultcmd.Rule{Name: "release reply lost", Action: faultcmd.DropReply, Match: faultcmd.Match{Script: "release", Key: k}})
	_ = a.Release(ctx, la) // retries on the unknown outcome
	wg.Wait()
}

// counterUnlockErrors: Counter sales on 3 Clients whose segment releases
// lose 30% of their replies: the units of a committed sale must not go
// back.
func counterUnlockErrors(h *harness) {
	var nodes []*node
	for range 3 {
		n, inj := h.cmdNode(dlock.Options{})
		h.schedule(inj, cmdSchedule{drop: 0.3, match: faultcmd.Match{Script: "release"}})
		nodes = append(nodes, n)
	}
	counterSales(h, nodes, time.Now().Add(1500*time.Millisecond), h.key("counter"))
}

// killEverything: on keys of every kind (plain, read, semaphore,
// reentrant), a child holds and two children wait queued; every client
// process is then SIGKILLed at once. Every key dlock made must expire on
// its own: the server is empty again within the TTL + the waiter lease +
// the fence counter's TTL (+ slack). A key left behind is a leak (L4).
func killEverything(h *harness) {
	ctx := h.t.Context()
	const ttl, lease, pickup = 300 * time.Millisecond, 600 * time.Millisecond, 200 * time.Millisecond
	kinds := []childConfig{{}, {Mode: modeShared}, {Mode: modeSemaphore, Limit: 1}, {Owner: "job-7"}}
	names := []string{"plain", "read", "sem", "reentrant"}
	direct := h.client(h.lock.Addr(), true)
	var children []*child
	for i, kc := range kinds {
		k := h.key(names[i])
		base := kc
		base.LockAddr, base.ResAddr, base.Key, base.TTL, base.Lease, base.Pickup, base.Fenced =
			h.lock.Addr(), resSrv.Addr(), k, ttl, lease, pickup, true
		sq := base
		sq.Role, sq.PauseAt = "squatter", -1
		c := h.spawn(sq)
		c.waitMark("acquired", 10*time.Second)
		c.waitMark("holding", 10*time.Second)
		children = append(children, c)
		for j := range 2 {
			wt := base
			wt.Role, wt.PauseAt, wt.Wait, wt.Writes = "holder", -1, 30*time.Second, 1
			if kc.Owner != "" {
				wt.Owner = kc.Owner + "-other" + string(rune('a'+j)) // other owners queue
			}
			if kc.Mode == modeShared {
				wt.Mode = "" // writers queue behind a reader
			}
			children = append(children, h.spawn(wt))
		}
		h.waitQueued(k, 2)
	}
	for _, c := range children {
		c.kill()
	}
	killed := time.Now()
	bound := ttl + lease + ttl + 10*time.Second + 2*time.Second // fence counter: TTL + 10s
	for time.Since(killed) < bound {
		if direct.DBSize(ctx).Val() == 0 {
			return
		}
		sleep(100 * time.Millisecond)
	}
	left, _ := direct.Keys(ctx, "*").Result()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range left {
		h.extra.add(invL4, 1, "%s still exists %v after every client was killed (PTTL %v)", k,
			bound.Round(time.Millisecond), direct.PTTL(ctx, k).Val())
	}
}

// adminSemaphore: the callers of a semaphore pass limit 2. Each round, a
// limit of 4 is stored, 4 callers take a permit each, the stored limit is
// removed, and 2 more callers queue behind them; an operator then
// releases one holder with ReleaseToken and, every other round, the rest
// with ForceRelease. No admin release may let a waiter in while 2 or more
// permits are in use.
func adminSemaphore(h *harness) {
	ctx := h.t.Context()
	sem := h.key("sem")
	nodes := []*node{h.lockNode(dlock.Options{}), h.lockNode(dlock.Options{})}
	workers := make([]*worker, 6)
	for i := range workers {
		workers[i] = h.worker(nodes[i%2], true)
	}
	proc := h.nextProc()
	var seq atomic.Uint64
	spec := semSpec(2, 1)
	for round := range 4 {
		setLimit(ctx, h, nodes[0], proc, &seq, sem, 4)
		var held []*dlock.Lock
		for _, w := range workers[:4] {
			actx, cancel := context.WithTimeout(ctx, time.Second)
			if lk := w.AcquireSpec(actx, sem, time.Second, true, spec); lk != nil {
				held = append(held, lk)
			}
			cancel()
		}
		setLimit(ctx, h, nodes[0], proc, &seq, sem, 0)
		var wg sync.WaitGroup
		for _, w := range workers[4:] {
			wg.Go(func() {
				actx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
				lk := w.AcquireSpec(actx, sem, time.Second, true, spec)
				cancel()
				if lk != nil {
					sleep(100 * time.Millisecond)
					_ = w.Release(context.WithoutCancel(ctx), lk)
				}
			})
		}
		h.waitQueued(sem, 2)
		operatorRelease(ctx, h, nodes[1], proc, &seq, sem, round%2 == 1)
		sleep(200 * time.Millisecond)
		for i, lk := range held {
			_ = workers[i].Release(context.WithoutCancel(ctx), lk)
		}
		wg.Wait()
	}
}
