package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/legacy"
)

// Every primitive and protocol under contention on one server, checked
// with the extended model: exclusive locks and reentrant holds on one key,
// readers and writers on another, a semaphore (whose limit SetLimit raises
// and removes meanwhile), multi-key locks over overlapping sets, and the
// legacy timestamp lock; a Counter's stock beside them. An operator
// releases semaphore holders now and then (ReleaseToken, ForceRelease). The mix is shared by
// the quick tier, the command-fault scenarios and the soak.

// mixOpts sizes a run of the mix.
type mixOpts struct {
	dur     time.Duration
	ttl     time.Duration
	counter bool // also sell a Counter's stock
	// only: the parts to run ("x" exclusive+reentrant, "rw" readers and
	// writers, "sem" semaphore+SetLimit, "multi", "legacy"); nil: all.
	only []string
}

func (o mixOpts) has(part string) bool { return o.only == nil || containsStr(o.only, part) }

// primitivesMix runs every primitive's workers on nodes (round robin) for
// o.dur, and the SetLimit nemesis on the semaphore.
func primitivesMix(h *harness, nodes []*node, o mixOpts) {
	ctx := h.t.Context()
	stop := time.Now().Add(o.dur)
	ttl := o.ttl
	if ttl == 0 {
		ttl = 400 * time.Millisecond
	}
	var wg sync.WaitGroup
	next := 0
	nextWorker := func() (*worker, *rand.Rand) {
		w := h.worker(nodes[next%len(nodes)], true)
		next++
		return w, rand.New(rand.NewPCG(h.seed(), uint64(next)))
	}
	loop := func(fn func(w *worker, rng *rand.Rand)) {
		w, rng := nextWorker()
		wg.Go(func() {
			for time.Now().Before(stop) && ctx.Err() == nil {
				fn(w, rng)
			}
		})
	}
	waitFor := func(rng *rand.Rand) time.Duration {
		if rng.IntN(4) == 0 {
			return 0 // TryLock
		}
		return time.Duration(200+rng.IntN(600)) * time.Millisecond
	}
	hold := func(rng *rand.Rand) time.Duration { return time.Duration(rng.IntN(30)) * time.Millisecond }

	// Exclusive and reentrant on one key.
	x := h.key("x")
	for range 2 * b2i(o.has("x")) {
		loop(func(w *worker, rng *rand.Rand) { w.Cycle(ctx, x, ttl, waitFor(rng), 1+rng.IntN(2), hold(rng)) })
	}
	for i := range 2 * b2i(o.has("x")) {
		owner := fmt.Sprintf("job-%d-%d", h.round, i)
		loop(func(w *worker, rng *rand.Rand) { reentrantCycle(ctx, w, x, owner, ttl, waitFor(rng), rng) })
	}
	// Readers and writers.
	rw := h.key("rw")
	for range 3 * b2i(o.has("rw")) {
		loop(func(w *worker, rng *rand.Rand) {
			w.CycleSpec(ctx, rw, sharedSpec(), ttl, waitFor(rng), 1+rng.IntN(2), hold(rng))
		})
	}
	for range 2 * b2i(o.has("rw")) {
		loop(func(w *worker, rng *rand.Rand) { w.Cycle(ctx, rw, ttl, waitFor(rng), 1+rng.IntN(2), hold(rng)) })
	}
	// A semaphore of 2 (SetLimit moves it to 3 and back meanwhile; an
	// operator releases holders with ReleaseToken and ForceRelease).
	sem := h.key("sem")
	for range 4 * b2i(o.has("sem")) {
		loop(func(w *worker, rng *rand.Rand) {
			permits := 1
			if rng.IntN(5) == 0 {
				permits = 2
			}
			w.CycleSpec(ctx, sem, semSpec(2, permits), ttl, waitFor(rng), 1, hold(rng)*3)
		})
	}
	if o.has("sem") {
		n := nodes[0]
		proc := h.nextProc()
		rng := rand.New(rand.NewPCG(h.seed(), 99))
		wg.Go(func() {
			var seq atomic.Uint64
			for time.Now().Before(stop) && ctx.Err() == nil {
				sleep(time.Duration(200+rng.IntN(400)) * time.Millisecond)
				limit := 0
				if rng.IntN(2) == 0 {
					limit = 3
				}
				setLimit(ctx, h, n, proc, &seq, sem, limit)
			}
			setLimit(ctx, h, n, proc, &seq, sem, 0)
		})
		wg.Go(func() { operatorReleases(ctx, h, nodes[len(nodes)-1], sem, stop) })
	}
	// Multi-key over overlapping pairs of three keys.
	mk := []string{h.key("m1"), h.key("m2"), h.key("m3")}
	for range 3 * b2i(o.has("multi")) {
		loop(func(w *worker, rng *rand.Rand) {
			i := rng.IntN(3)
			w.CycleMulti(ctx, []string{mk[i], mk[(i+1)%3]}, ttl, waitFor(rng), 1, hold(rng))
		})
	}
	// Legacy, in milliseconds (values are shared by clients locking in one
	// unit: the history names each grant itself).
	leg := h.key("legacy")
	for range 2 * b2i(o.has("legacy")) {
		w, rng := nextWorker()
		w.LockOpts = []dlock.LockOption{dlock.WithProtocol(legacy.New(legacy.Options{Unit: legacy.Milliseconds}))}
		w.Unique, w.Res = true, nil
		wg.Go(func() {
			for time.Now().Before(stop) && ctx.Err() == nil {
				w.Cycle(ctx, leg, ttl, waitFor(rng), 1, hold(rng))
			}
		})
	}
	if o.counter {
		wg.Go(func() { counterSales(h, nodes, stop, h.key("counter")) })
	}
	wg.Wait()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// reentrantCycle: the owner's handle, sometimes a nested one (taken while
// the first is held, from another goroutine), writes under each, releases.
func reentrantCycle(ctx context.Context, w *worker, key, owner string, ttl, wait time.Duration, rng *rand.Rand) {
	spec := reentrantSpec(owner)
	timeout := max(wait, 100*time.Millisecond)
	actx, cancel := context.WithTimeout(ctx, timeout)
	lk := w.AcquireSpec(actx, key, ttl, wait > 0, spec)
	cancel()
	if lk == nil {
		return
	}
	w.Work(ctx, lk, 1, 0)
	if rng.IntN(2) == 0 {
		var inner sync.WaitGroup
		inner.Go(func() {
			actx, cancel := context.WithTimeout(ctx, timeout)
			lk2 := w.AcquireSpec(actx, key, ttl, false, spec)
			cancel()
			if lk2 == nil {
				return
			}
			w.Work(ctx, lk2, 1, 0)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = w.Release(rctx, lk2)
			cancel()
		})
		inner.Wait()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = w.Release(rctx, lk)
	cancel()
}

// setLimit calls SetLimit and records it.
func setLimit(ctx context.Context, h *harness, n *node, proc int, seq *atomic.Uint64, key string, limit int) {
	id := uint64(proc+1)<<40 | 1<<38 | seq.Add(1)
	h.hist.Record(event{Type: evInvoke, ID: id, Proc: proc, T: clock.Now(), Kind: kindSetLimit, Key: key, Limit: limit})
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	err := n.Locks.Semaphore(key, 1).SetLimit(sctx, limit)
	cancel()
	e := event{Type: evOK, ID: id, Proc: proc, T: clock.Now(), Kind: kindSetLimit, Key: key, Limit: limit}
	switch {
	case errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrContextDone) || errors.Is(err, context.DeadlineExceeded):
		e.Type, e.Err = evInfo, errText(err)
	case err != nil:
		e.Type, e.Err = evFail, errText(err)
	}
	h.hist.Record(e)
}

// operatorReleases is the operator on the semaphore sem until stop: now
// and then it releases one holder it finds with ReleaseToken, and more
// rarely every holder with ForceRelease.
func operatorReleases(ctx context.Context, h *harness, n *node, sem string, stop time.Time) {
	proc := h.nextProc()
	rng := rand.New(rand.NewPCG(h.seed(), 98))
	var seq atomic.Uint64
	for time.Now().Before(stop) && ctx.Err() == nil {
		sleep(time.Duration(150+rng.IntN(300)) * time.Millisecond)
		operatorRelease(ctx, h, n, proc, &seq, sem, rng.IntN(4) == 0)
	}
}

// operatorRelease releases a holder of the semaphore sem that Inspect finds
// (ReleaseToken of its token), or every holder (ForceRelease), and records
// the call.
func operatorRelease(ctx context.Context, h *harness, n *node, proc int, seq *atomic.Uint64, sem string, force bool) {
	info, err := n.Admin.Inspect(ctx, sem)
	if err != nil || len(info.Tokens) == 0 {
		return
	}
	kind, token := kindReleaseToken, info.Tokens[int(seq.Load())%len(info.Tokens)]
	if force {
		kind, token = kindForceRelease, ""
	}
	id := uint64(proc+1)<<40 | 1<<37 | seq.Add(1)
	h.hist.Record(event{Type: evInvoke, ID: id, Proc: proc, T: clock.Now(), Kind: kind, Key: sem, Owner: token})
	actx, cancel := context.WithTimeout(ctx, time.Second)
	if force {
		_, err = n.Admin.ForceRelease(actx, sem)
	} else {
		err = n.Admin.ReleaseToken(actx, sem, token)
	}
	cancel()
	e := event{Type: evOK, ID: id, Proc: proc, T: clock.Now(), Kind: kind, Key: sem, Owner: token}
	switch {
	case errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrContextDone) || errors.Is(err, context.DeadlineExceeded):
		e.Type, e.Err = evInfo, errText(err)
	case err != nil:
		e.Type, e.Err = evFail, errText(err)
	}
	h.hist.Record(e)
}

var errOrderRejected = errors.New("order rejected")

// counterSales sells a Counter's stock from every node until stop or
// until it is sold out. A sale is counted when fn, the order, committed
// (returned nil). Sold + what is left must never exceed the stock: a unit
// sold twice is a stale write accepted by the resource (S2). Take errors
// that may have applied the sale are counted apart (units may be missing
// then, never extra).
func counterSales(h *harness, nodes []*node, stop time.Time, name string) {
	counterSalesOf(h, nodes, stop, name, 40)
}

// counterSalesOf is counterSales of a stock of stock units.
func counterSalesOf(h *harness, nodes []*node, stop time.Time, name string, stock int64) {
	ctx := h.t.Context()
	c0 := nodes[0].Locks.Counter(name, 4)
	var err error
	for range 10 { // Set itself may meet a command fault
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = c0.Set(sctx, stock)
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil {
		h.t.Logf("counter: Set failed (%v): not exercised", err)
		return
	}
	var sold, errs, rejected, exhausted atomic.Int64
	var wg sync.WaitGroup
	for i, n := range nodes {
		c := n.Locks.Counter(name, 4)
		rng := rand.New(rand.NewPCG(h.seed(), uint64(i)))
		wg.Go(func() {
			for time.Now().Before(stop) && ctx.Err() == nil {
				tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := c.Take(tctx, 1, func(ctx context.Context, seg int) error {
					if rng.IntN(8) == 0 {
						rejected.Add(1)
						return errOrderRejected // the units must go back
					}
					sold.Add(1)
					return nil
				})
				cancel()
				switch {
				case errors.Is(err, dlock.ErrExhausted):
					exhausted.Add(1)
					return
				case errors.Is(err, errOrderRejected):
				case err != nil:
					errs.Add(1)
				}
				sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	var left int64
	for range 10 { // Total too may meet a command fault
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		left, err = c0.Total(tctx)
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil {
		h.t.Logf("counter: Total failed: %v", err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.extra.OK += int(sold.Load())
	h.extra.Fail += int(errs.Load())
	h.extra.Counter = append(h.extra.Counter, counterRun{Stock: stock, Sold: sold.Load(), Left: left, Errors: errs.Load()})
	if n := sold.Load() + left - stock; n > 0 {
		h.extra.StaleAccepted += int(n)
		h.extra.add(invS2, int(n), "counter %s: stock %d, sold %d, %d left: %d unit(s) sold twice", name, stock, sold.Load(), left, n)
	}
}
