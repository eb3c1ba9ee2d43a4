package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/legacy"
)

// hostileKeys: the victims (readers and writers on one key, a reentrant
// owner on another, a semaphore with SetLimit, a Counter) run under
// contention while hostile workers lock keys drawn from the victims'
// auxiliary-name space (their queue, fence, readers, holds, permits,
// limit, count, wake and waiter-lease names), Clients with prefixes that
// alias or glob ('#', '[', '*') lock keys whose auxiliary names collide
// with the default prefix's, and reentrant owners named after other
// holders' values (a holder's token read from the key, a legacy
// timestamp, SharedValue) try to join. Every grant is checked as usual:
// a key the library refuses (ErrInvalidArgument) is a failed acquire, a
// hostile grant that takes another lock's state shows as overlapping
// holders, repeated fences or a broken history.
func hostileKeys(h *harness) {
	ctx := h.t.Context()
	stop := time.Now().Add(1500 * time.Millisecond)
	const ttl = 400 * time.Millisecond
	var wg sync.WaitGroup
	seq := 0
	mkNode := func(opts dlock.Options) *node {
		n, err := newNode(h.client(h.lock.Addr(), true), opts, clock, h.hist)
		if err != nil {
			return nil
		}
		h.t.Cleanup(func() { _ = n.Close() })
		return n
	}
	def := []*node{mkNode(dlock.Options{}), mkNode(dlock.Options{})}
	loop := func(n *node, fn func(w *worker, rng *rand.Rand)) {
		w := h.worker(n, true)
		seq++
		rng := rand.New(rand.NewPCG(h.seed(), uint64(seq)))
		wg.Go(func() {
			for time.Now().Before(stop) && ctx.Err() == nil {
				fn(w, rng)
				sleep(time.Duration(1+rng.IntN(5)) * time.Millisecond) // a refused call returns at once
			}
		})
	}
	wait := func(rng *rand.Rand) time.Duration {
		if rng.IntN(3) == 0 {
			return 0
		}
		return time.Duration(100+rng.IntN(400)) * time.Millisecond
	}
	// The victims. Their keys are plain names: h.key's would do, but the
	// hostile names below are derived from them.
	tag := fmt.Sprintf("%d", h.round)
	orders, jobs, pool, stock := "orders"+tag, "jobs"+tag, "pool"+tag, "stock"+tag
	h.track(orders, jobs, pool)
	for i := range 4 {
		n := def[i%2]
		if i < 2 {
			loop(n, func(w *worker, rng *rand.Rand) { w.CycleSpec(ctx, orders, sharedSpec(), ttl, wait(rng), 1, 0) })
		} else {
			loop(n, func(w *worker, rng *rand.Rand) { w.Cycle(ctx, orders, ttl, wait(rng), 1, 0) })
		}
	}
	for i := range 2 {
		owner := fmt.Sprintf("job-%s-%d", tag, i)
		loop(def[i%2], func(w *worker, rng *rand.Rand) { reentrantCycle(ctx, w, jobs, owner, ttl, wait(rng), rng) })
	}
	for i := range 3 {
		loop(def[i%2], func(w *worker, rng *rand.Rand) { w.CycleSpec(ctx, pool, semSpec(2, 1), ttl, wait(rng), 1, 0) })
	}
	{
		var s atomic.Uint64
		proc := h.nextProc()
		wg.Go(func() {
			for time.Now().Before(stop) && ctx.Err() == nil {
				setLimit(ctx, h, def[0], proc, &s, pool, 1+int(s.Load()%2))
				sleep(300 * time.Millisecond)
			}
		})
	}
	wg.Go(func() { counterSales(h, def, stop, stock) })

	// Hostile lock keys: the victims' auxiliary names.
	var aux []string
	for _, k := range []string{orders, jobs, pool, stock + ":0", stock + ":1"} {
		for _, s := range []string{":fence", ":q", ":wake", ":readers", ":holds", ":permits", ":limit", ":count"} {
			aux = append(aux, "dlock:{"+k+"}"+s)
		}
	}
	for i := range 3 {
		loop(def[i%2], func(w *worker, rng *rand.Rand) {
			k := aux[rng.IntN(len(aux))]
			h.track(k)
			w.Cycle(ctx, k, ttl, wait(rng), 1, 0)
		})
	}
	{ // a legacy lock on a victim's fence and queue
		w := h.worker(def[0], true)
		w.LockOpts = []dlock.LockOption{dlock.WithProtocol(legacy.New(legacy.Options{Unit: legacy.Milliseconds}))}
		w.Unique, w.Res = true, nil
		rng := rand.New(rand.NewPCG(h.seed(), 77))
		targets := []string{"dlock:{" + orders + "}:fence", "dlock:{" + orders + "}:q", "dlock:{" + pool + "}:limit"}
		h.track(targets...)
		wg.Go(func() {
			for time.Now().Before(stop) && ctx.Err() == nil {
				w.Cycle(ctx, targets[rng.IntN(len(targets))], ttl, wait(rng), 1, 0)
				sleep(time.Duration(1+rng.IntN(5)) * time.Millisecond)
			}
		})
	}
	// Prefixes: "dlock:#x" with key K names exactly the default prefix's
	// names of "x:{K}"; '[' and '*' are glob characters.
	aliased := "t" + tag
	h.track(aliased, "x:{"+aliased+"}")
	for _, p := range []string{"dlock:#x", "p[x]", "a*b"} {
		n := mkNode(dlock.Options{Prefix: p})
		if n == nil {
			h.mu.Lock()
			h.extra.Refused++ // the prefix was refused: nothing to alias
			h.mu.Unlock()
			continue
		}
		loop(n, func(w *worker, rng *rand.Rand) { w.Cycle(ctx, aliased, ttl, wait(rng), 1, 0) })
	}
	loop(def[1], func(w *worker, rng *rand.Rand) { w.Cycle(ctx, "x:{"+aliased+"}", ttl, wait(rng), 1, 0) })

	// Owners named after other holders' values.
	plain := h.key("plain")
	loop(def[0], func(w *worker, rng *rand.Rand) { w.Cycle(ctx, plain, ttl, wait(rng), 1, 20*time.Millisecond) })
	legKey := h.key("legacy")
	{
		w := h.worker(def[1], true)
		w.LockOpts = []dlock.LockOption{dlock.WithProtocol(legacy.New(legacy.Options{}))}
		w.Unique, w.Res = true, nil
		wg.Go(func() {
			for time.Now().Before(stop) && ctx.Err() == nil {
				w.Cycle(ctx, legKey, ttl, 300*time.Millisecond, 1, 30*time.Millisecond)
			}
		})
	}
	direct := h.client(h.lock.Addr(), true)
	for i := range 2 {
		loop(def[i], func(w *worker, rng *rand.Rand) {
			k := []string{plain, legKey, orders, jobs}[rng.IntN(4)]
			v, err := direct.Get(ctx, k).Result()
			if err != nil || v == "" || rng.IntN(5) == 0 {
				v = admin.SharedValue
			}
			actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			lk := w.AcquireSpec(actx, k, ttl, false, reentrantSpec(v))
			cancel()
			if lk != nil {
				w.Work(ctx, lk, 1, 0)
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				_ = w.Release(rctx, lk)
				cancel()
			}
			sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
		})
	}
	wg.Wait()
}

// track adds keys whose resources are read at the end of the history.
func (h *harness) track(keys ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		if !containsStr(h.keys, k) {
			h.keys = append(h.keys, k)
		}
	}
}

func containsStr(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
