package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fenced"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestFaults is the quick tier: every scenario of quickScenarios, each a
// few histories, on one redis-server per history.
func TestFaults(t *testing.T) {
	for _, sc := range quickScenarios() {
		t.Run(sc.topo+"/"+sc.name, func(t *testing.T) { runScenario(t, sc, sc.rounds) })
	}
}

func quickScenarios() []scenario {
	const single = "single"
	return []scenario{
		{topo: single, name: "contention", rounds: 2, run: contention,
			note: "8 workers on 3 Clients, 2 keys, no fault"},
		{topo: single, name: "holder-pause fenced", rounds: 2, run: holderPause(true),
			assert: staleRefused, note: "SIGSTOP of a child holder between its check and its write, past its deadline"},
		{topo: single, name: "holder-pause unfenced (canary)", rounds: 2, run: holderPause(false), must: []invariant{invS2},
			params: plainResource, note: "the same against a resource that does not check fences"},
		{topo: single, name: "resource-delay fenced", rounds: 2, run: resourceDelay(true),
			note: "a holder's write delayed 450ms (proxy) past its 300ms lease"},
		{topo: single, name: "resource-delay unfenced (canary)", rounds: 2, run: resourceDelay(false), must: []invariant{invS2},
			params: plainResource, note: "the same against a resource that does not check fences"},
		{topo: single, name: "late-reply", rounds: 2, run: lateReply(false),
			note: "acquire reply delayed past the TTL (proxy 2x120ms, TTL 200ms)"},
		{topo: single, name: "late-reply naive client (canary)", rounds: 2, run: lateReply(true), must: []invariant{invS1},
			note: "the same with a client that dates validity from the reply (SET NX PX, no check)"},
		{topo: single, name: "lost-reply timeout", rounds: 2, run: lostReply(false), assert: orphaned,
			note: "acquire applied, reply later than the caller's context (TTL 5s)"},
		{topo: single, name: "lost-reply reset", rounds: 2, run: lostReply(true), assert: orphaned,
			note: "acquire applied, connection reset before the reply (TTL 5s)"},
		{topo: single, name: "redis-stall DEBUG SLEEP", rounds: 2, run: redisStall("debug-sleep"),
			note: "server asleep 450ms with TTL 300ms under contention"},
		{topo: single, name: "redis-stall CLIENT PAUSE WRITE", rounds: 2, run: redisStall("client-pause"),
			note: "writes paused 450ms with TTL 300ms under contention"},
		{topo: single, name: "redis-stall SIGSTOP", rounds: 2, run: redisStall("sigstop"),
			note: "server stopped 450ms with TTL 300ms under contention"},
		{topo: single, name: "restart no persistence (canary)", rounds: 2, run: restartAmnesia, must: []invariant{invS1},
			may: []invariant{invS3}, note: "SIGKILL + restart without persistence while held"},
		{topo: single, name: "crash AOF always", rounds: 1, run: aofCrash, server: redistest.Config{AOF: "always"},
			note: "SIGKILL + restart while held, appendfsync always"},
		{topo: single, name: "crash AOF everysec", rounds: 1, run: aofCrash, server: redistest.Config{AOF: "everysec"},
			note: "SIGKILL + restart while held, appendfsync everysec (page cache survives)"},
		{topo: single, name: "power loss AOF everysec (canary)", rounds: 2, run: powerLoss, must: []invariant{invS1},
			may: []invariant{invS3}, server: redistest.Config{AOF: "everysec"},
			note: "SIGKILL + AOF rolled back to before the grant (<1s: everysec's window)" + fenceNote},
		{topo: single, name: "holder SIGKILL", rounds: 3, run: holderKill,
			params: func(p *params) { p.L2Bound = 400*time.Millisecond + 600*time.Millisecond/3 + 300*time.Millisecond },
			note:   "child holder (TTL 400ms) killed; 2 queued waiters"},
		{topo: single, name: "holder SIGKILL, no active expiry", rounds: 2, run: noActiveExpiry(holderKill),
			params: func(p *params) { p.L2Bound = 400*time.Millisecond + 600*time.Millisecond/3 + 300*time.Millisecond },
			note:   "the same with DEBUG SET-ACTIVE-EXPIRE 0: expired keys linger until touched"},
		{topo: single, name: "waiter SIGSTOP at queue head", rounds: 2, run: waiterPause,
			note: "the first queued waiter (a child) is stopped when the lock is handed to it"},
		{topo: single, name: "herd 50 waiters", rounds: 1, run: herd(50, false), params: l3,
			note: "50 queued waiters on 8 Clients, one release"},
		{topo: single, name: "herd 200 waiters", rounds: 1, run: herd(200, false), params: l3,
			note: "200 queued waiters on 8 Clients, one release"},
		{topo: single, name: "herd 200 Barging (canary)", rounds: 1, run: herd(200, true), params: l3, must: []invariant{invL3},
			note: "the same with Options.Barging: every Client's waiters race on each release"},
		{topo: single, name: "stall, no ctx timeout (canary)", rounds: 1, run: stallNoCtxTimeout,
			must: []invariant{invL1}, note: "DEBUG SLEEP 1.5s; go-redis without ContextTimeoutEnabled waits its ReadTimeout, not the context"},
		{topo: single, name: "unchecked release (canary)", rounds: 1, run: uncheckedRelease(false), must: []invariant{invR1},
			may: []invariant{invS3}, note: "checker canary: an expired holder releases with a DEL that does not compare tokens"},
		{topo: single, name: "top-level DEL (canary)", rounds: 1, run: uncheckedRelease(true), must: []invariant{invR1},
			may: []invariant{invS3}, note: "checker canary: the same DEL sent as a plain command, outside any script"},
		{topo: single, name: "no compensation (canary)", rounds: 1, run: noCompensation, must: []invariant{invL4},
			note: "checker canary: an acquire whose reply was lost, by a client that does not clean up (TTL 3s)"},
		{topo: single, name: "renew-jitter", rounds: 1, run: renewJitter,
			note: "TTL 120ms, latency jitter 0-25ms each way on every lock connection"},
		{topo: single, name: "primitives mix", rounds: 1, run: mixScenario(2 * time.Second),
			note: "exclusive+reentrant, readers+writers, semaphore+SetLimit, multi-key, legacy, Counter; no fault"},
		{topo: single, name: "primitives mix, CPU hog", rounds: 1, run: mixScenario(2 * time.Second),
			load: Load{Procs: 2, Goroutines: 2, Duty: 0.8},
			note: "the same with busy processes and goroutines beside the clients"},
		{topo: single, name: "hostile keys", rounds: 1, run: hostileKeys,
			note: "locks on other locks' auxiliary names, aliasing/glob prefixes, owner ids equal to holders' values"},
	}
}

// mixScenario runs the primitives mix on 3 Clients of the lock server.
func mixScenario(d time.Duration) func(h *harness) {
	return func(h *harness) {
		nodes := []*node{h.lockNode(dlock.Options{}), h.lockNode(dlock.Options{}), h.lockNode(dlock.Options{})}
		primitivesMix(h, nodes, mixOpts{dur: d, counter: true})
	}
}

func plainResource(p *params) { p.FencedResource = false }

func l3(p *params) { p.L3Bound = 4 }

func staleRefused(t *testing.T, r result) {
	if r.StaleAttempted == 0 || r.StaleRefused == 0 || r.StaleAccepted != 0 {
		t.Errorf("fault not shown: stale writes attempted %d, refused %d, accepted %d",
			r.StaleAttempted, r.StaleRefused, r.StaleAccepted)
	}
}

// lockNode returns a recorded dlock Client of the history's lock server.
func (h *harness) lockNode(opts dlock.Options) *node {
	return h.node(h.client(h.lock.Addr(), true), opts)
}

// warm loads dlock's scripts on n's server and opens a connection, so the
// first recorded call costs one round trip (no NOSCRIPT, no dial): a fault
// timed in round trips then hits the call it is meant to hit.
func (h *harness) warm(n *node) {
	h.t.Helper()
	ctx := h.t.Context()
	lk, err := n.Locks.TryLock(ctx, "fk:warm:"+h.t.Name())
	if err != nil {
		h.t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		h.t.Fatal(err)
	}
}

// waitKey waits until the lock server holds k (at most 5s).
func (h *harness) waitKey(k string) {
	direct := h.client(h.lock.Addr(), true)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if direct.Exists(h.t.Context(), k).Val() == 1 {
			return
		}
	}
	h.t.Errorf("%s never appeared on the server", k)
}

// orphaned asserts the lost-reply fault happened: the acquire was applied
// and its token left without a holder (L4 then bounds how long).
func orphaned(t *testing.T, r result) {
	if len(r.Orphans) < r.Histories {
		t.Errorf("fault not shown: %d orphaned grants in %d histories", len(r.Orphans), r.Histories)
	}
}

func contention(h *harness) {
	nodes := []*node{h.lockNode(dlock.Options{}), h.lockNode(dlock.Options{}), h.lockNode(dlock.Options{})}
	keys := []string{h.key("a"), h.key("b")}
	var wg sync.WaitGroup
	for i := range 8 {
		w := h.worker(nodes[i%len(nodes)], true)
		rng := rand.New(rand.NewPCG(h.rng.Uint64(), uint64(i)))
		wg.Go(func() {
			for range 10 {
				w.Cycle(h.t.Context(), keys[rng.IntN(len(keys))], 500*time.Millisecond, 3*time.Second, 2, 2*time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// holderPause: a child holder checks its lock is valid, is stopped before
// it writes, stays stopped until a waiter has taken over and written, then
// writes (stale).
func holderPause(fenced bool) func(h *harness) {
	return func(h *harness) {
		ctx := h.t.Context()
		k := h.key("k")
		c := h.spawn(childConfig{Role: "holder", LockAddr: h.lock.Addr(), ResAddr: resSrv.Addr(), Key: k,
			TTL: 300 * time.Millisecond, Writes: 2, Hold: 20 * time.Millisecond, PauseAt: 1, Fenced: fenced})
		c.waitMark("acquired", 10*time.Second)
		w := h.worker(h.lockNode(dlock.Options{}), fenced)
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.Cycle(ctx, k, 300*time.Millisecond, 5*time.Second, 1, 0)
		}()
		c.waitMark("before-write", 5*time.Second)
		since := c.stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			h.t.Fatal("the waiter never took over from the stopped holder")
		}
		sleep(50 * time.Millisecond)
		c.cont(since, "go")
		c.waitMark("done", 10*time.Second)
		c.wait(10 * time.Second)
	}
}

// resourceDelay: the holder's write travels through a proxy that delays it
// beyond the holder's lease; a new holder writes meanwhile.
func resourceDelay(useFence bool) func(h *harness) {
	return func(h *harness) {
		ctx := h.t.Context()
		k := h.key("k")
		px := redistest.NewProxy(h.t, resSrv.Addr())
		slow := h.client(px.Addr(), false)
		// Connect and load the guard script before the delay.
		if err := fenced.Set(ctx, slow, "fk:warm:"+h.t.Name(), 1, "warm", ""); err != nil {
			h.t.Fatal(err)
		}
		const delay, ttl = 450 * time.Millisecond, 300 * time.Millisecond
		px.SetLatency(delay)
		a := &worker{Proc: h.nextProc(), Node: h.lockNode(dlock.Options{}), Res: slow, Fenced: useFence}
		b := h.worker(h.lockNode(dlock.Options{}), useFence)
		actx, cancel := context.WithTimeout(ctx, time.Second)
		lk := a.Acquire(actx, k, ttl, true, dlock.WithoutRenewal())
		cancel()
		if lk == nil {
			h.t.Fatal("holder could not acquire")
		}
		sent := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		a.Write(wctx, lk) // gives up after 50ms; the proxy delivers it after 450ms
		cancel()
		b.Cycle(ctx, k, time.Second, 3*time.Second, 1, 0)
		h.nem.Span(kindFault, -1, "resource write delayed", clock.At(sent), clock.At(sent.Add(delay)))
		sleep(time.Until(sent.Add(delay + 200*time.Millisecond)))
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = a.Release(rctx, lk)
		cancel()
	}
}

// lateReply: A's acquire reaches Redis, but its reply comes back after the
// TTL (proxy latency 120ms each way, TTL 200ms). B takes the key when it
// expires. dlock dates the validity from the send time, so the reply
// arrives with no validity left and is not a grant. The naive client (the
// canary) dates it from the reply and believes it holds the key, with B.
func lateReply(naive bool) func(h *harness) {
	return func(h *harness) {
		ctx := h.t.Context()
		k := h.key("k")
		px := redistest.NewProxy(h.t, h.lock.Addr())
		ca := h.client(px.Addr(), false)
		if err := ca.Ping(ctx).Err(); err != nil {
			h.t.Fatal(err)
		}
		a := h.worker(h.node(ca, dlock.Options{}), true)
		b := h.worker(h.lockNode(dlock.Options{}), true)
		h.warm(a.Node)
		const ttl = 200 * time.Millisecond
		if naive {
			naiveLoad(h, ca)
		}
		px.SetLatency(120 * time.Millisecond)
		var wg sync.WaitGroup
		wg.Go(func() {
			if naive {
				naiveHold(h, a, ca, k, ttl)
				return
			}
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			lk := a.Acquire(actx, k, ttl, false)
			cancel()
			if lk == nil {
				return
			}
			a.Work(ctx, lk, 1, 0)
			_ = a.Release(ctx, lk)
		})
		h.waitKey(k) // A's request has reached Redis
		got := false
		for end := time.Now().Add(time.Second); time.Now().Before(end) && !got; {
			if lk := b.Acquire(ctx, k, time.Second, false); lk != nil {
				got = true
				b.Work(ctx, lk, 2, 20*time.Millisecond)
				_ = b.Release(ctx, lk)
				break
			}
			sleep(5 * time.Millisecond)
		}
		wg.Wait()
		if !got {
			h.t.Error("B never got the key after A's lease ran out")
		}
	}
}

// The naive client's acquire: SET NX PX and a fence from dlock's counter
// (so the fences of both clients are comparable); its release: compare
// and delete.
var (
	naiveAcquire = redis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`)
	naiveRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

func naiveLoad(h *harness, rdb *redis.Client) {
	for _, s := range []*redis.Script{naiveAcquire, naiveRelease} {
		if err := s.Load(h.t.Context(), rdb).Err(); err != nil {
			h.t.Fatal(err)
		}
	}
}

// naiveHold: w acquires k as the naive client does, believes it holds it
// for ttl from the reply (recorded as its deadline), writes, and releases.
func naiveHold(h *harness, w *worker, rdb *redis.Client, k string, ttl time.Duration) {
	ctx := h.t.Context()
	token := fmt.Sprintf("naive-%d-%d", h.round, w.Proc)
	id := w.id()
	sent := clock.Now()
	w.rec(event{Type: evInvoke, ID: id, T: sent, Kind: kindTry, Key: k, TTL: int64(ttl)})
	f, err := naiveAcquire.EvalSha(ctx, rdb, []string{k, "dlock:{" + k + "}:fence"}, token, ttl.Milliseconds()).Int64()
	now := clock.Now()
	if err != nil || f == 0 {
		w.rec(event{Type: evFail, ID: id, T: now, Kind: kindTry, Key: k})
		return
	}
	// Its belief: valid until the reply time + TTL - drift. (The request
	// was sent at sent: that is what Redis's expiry follows.)
	drift := int64(ttl)/100 + int64(2*time.Millisecond)
	w.rec(event{Type: evOK, ID: id, T: now, Kind: kindTry, Key: k, Fence: uint64(f), Owner: token,
		Deadline: now + int64(ttl) - drift, Sent: sent, TTL: int64(ttl), Drift: drift})
	// It works "while it holds the lock": writes, then stays until its
	// naive deadline.
	id = w.id()
	w.rec(event{Type: evInvoke, ID: id, T: clock.Now(), Kind: kindWrite, Key: k, Fence: uint64(f), Owner: token})
	err = fenced.Set(ctx, h.res, resKey(k), uint64(f), token, resourceValue(uint64(f), token))
	e := event{Type: evOK, ID: id, T: clock.Now(), Kind: kindWrite, Key: k}
	if errors.Is(err, fenced.ErrStale) {
		e.Type = evFail
	} else if err != nil {
		e.Type = evInfo
	}
	w.rec(e)
	sleep(ttl - 30*time.Millisecond)
	id = w.id()
	w.rec(event{Type: evInvoke, ID: id, T: clock.Now(), Kind: kindUnlock, Key: k, Owner: token})
	n, err := naiveRelease.EvalSha(ctx, rdb, []string{k}, token).Int64()
	e = event{Type: evOK, ID: id, T: clock.Now(), Kind: kindUnlock, Key: k}
	switch {
	case err != nil:
		e.Type = evInfo
	case n == 0:
		e.Type = evFail
	}
	w.rec(e)
}

// lostReply: A's acquire is applied but its reply never arrives (a context
// that ends first, or a connection reset). With a 5s TTL, only the
// library's compensating delete frees the key quickly (L4).
func lostReply(reset bool) func(h *harness) {
	return func(h *harness) {
		ctx := h.t.Context()
		k := h.key("k")
		px := redistest.NewProxy(h.t, h.lock.Addr())
		ca := h.client(px.Addr(), false)
		if err := ca.Ping(ctx).Err(); err != nil {
			h.t.Fatal(err)
		}
		a := h.worker(h.node(ca, dlock.Options{}), true)
		b := h.worker(h.lockNode(dlock.Options{}), true)
		h.warm(a.Node)
		start := clock.Now()
		var lk *dlock.Lock
		if reset {
			px.SetLatency(100 * time.Millisecond)
			go func() {
				h.waitKey(k) // applied; its reply is due 100ms later
				px.CutAll()
			}()
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			lk = a.Acquire(actx, k, 5*time.Second, false)
			cancel()
		} else {
			px.SetLatency(150 * time.Millisecond)
			actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			lk = a.Acquire(actx, k, 5*time.Second, false)
			cancel()
		}
		px.SetLatency(0)
		h.nem.Span(kindFault, -1, "reply lost", start, clock.Now())
		if lk != nil {
			h.t.Fatal("the acquire's reply was not lost: the fault did not happen")
		}
		got := false
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
			if lk := b.Acquire(ctx, k, time.Second, false); lk != nil {
				b.Work(ctx, lk, 1, 0)
				_ = b.Release(ctx, lk)
				got = true
				break
			}
			sleep(10 * time.Millisecond)
		}
		if !got {
			h.t.Error("the key stayed taken after the lost reply (orphan)")
		}
	}
}

// redisStall: 4 workers contend with TTL 300ms while the server stalls for
// 450ms. Holders must learn of the loss by their deadline, Lock calls must
// return by their context deadline, and no two holders overlap.
func redisStall(kind string) func(h *harness) {
	return func(h *harness) {
		ctx := h.t.Context()
		k := h.key("k")
		nodes := []*node{h.lockNode(dlock.Options{}), h.lockNode(dlock.Options{})}
		admin := h.client(h.lock.Addr(), true)
		stop := time.Now().Add(1600 * time.Millisecond)
		var wg sync.WaitGroup
		for i := range 4 {
			w := h.worker(nodes[i%2], true)
			wg.Go(func() {
				for time.Now().Before(stop) {
					w.Cycle(ctx, k, 300*time.Millisecond, 600*time.Millisecond, 3, 30*time.Millisecond)
				}
			})
		}
		sleep(300 * time.Millisecond)
		const d = 450 * time.Millisecond
		switch kind {
		case "debug-sleep":
			h.nem.Do("DEBUG SLEEP 0.45", func() {
				if err := admin.Do(ctx, "debug", "sleep", "0.45").Err(); err != nil {
					h.t.Error(err)
				}
			})
		case "client-pause":
			h.nem.Do("CLIENT PAUSE 450 WRITE", func() {
				if err := admin.Do(ctx, "client", "pause", d.Milliseconds(), "write").Err(); err != nil {
					h.t.Error(err)
				}
				sleep(d)
			})
		case "sigstop":
			h.nem.Do("SIGSTOP redis-server 450ms", func() {
				if err := h.lock.Pause(); err != nil {
					h.t.Error(err)
				}
				sleep(d)
				if err := h.lock.Resume(); err != nil {
					h.t.Error(err)
				}
			})
		}
		wg.Wait()
	}
}

// restartAmnesia: the server is killed and restarted without persistence
// while A holds the key; B takes it at once, while A still believes it
// holds it (until its next renewal). Fences restart from the server's
// clock, so the resource still refuses A.
func restartAmnesia(h *harness) {
	ctx := h.t.Context()
	k := h.key("k")
	a := h.worker(h.lockNode(dlock.Options{}), true)
	b := h.worker(h.lockNode(dlock.Options{}), true)
	lk := a.Acquire(ctx, k, 2*time.Second, false)
	if lk == nil {
		h.t.Fatal("A could not acquire")
	}
	a.Write(ctx, lk)
	h.nem.Do("SIGKILL + restart without persistence", func() {
		if err := h.lock.Restart(); err != nil {
			h.t.Fatal(err)
		}
	})
	var lb *dlock.Lock
	for i := 0; i < 100 && lb == nil; i++ {
		if lb = b.Acquire(ctx, k, 2*time.Second, false); lb == nil {
			sleep(5 * time.Millisecond)
		}
	}
	if lb == nil {
		h.t.Fatal("B could not acquire after the restart")
	}
	b.Write(ctx, lb)
	if valid(lk) {
		a.Write(ctx, lk) // A still believes it holds: the fence must save the resource
	}
	select {
	case <-lk.Done():
	case <-time.After(3 * time.Second):
		h.t.Error("A never learnt it had lost the lock")
	}
	_ = b.Release(ctx, lb)
	_ = a.Release(ctx, lk)
}

// aofCrash: SIGKILL and restart with the AOF intact while A holds the key:
// the lock survives, B cannot get in, A keeps renewing.
func aofCrash(h *harness) {
	ctx := h.t.Context()
	k := h.key("k")
	a := h.worker(h.lockNode(dlock.Options{}), true)
	b := h.worker(h.lockNode(dlock.Options{}), true)
	// A TTL above the restart's time on a loaded machine (1.5 s seen at
	// load 20): a restart longer than the TTL loses any lock.
	lk := a.Acquire(ctx, k, 5*time.Second, false)
	if lk == nil {
		h.t.Fatal("A could not acquire")
	}
	a.Write(ctx, lk)
	sleep(100 * time.Millisecond)
	h.nem.Do("SIGKILL + restart, AOF kept", func() {
		if err := h.lock.Restart(); err != nil {
			h.t.Fatal(err)
		}
	})
	for end := time.Now().Add(800 * time.Millisecond); time.Now().Before(end); {
		if lb := b.Acquire(ctx, k, time.Second, false); lb != nil {
			b.Write(ctx, lb)
			_ = b.Release(ctx, lb)
		}
		if valid(lk) {
			a.Write(ctx, lk)
		}
		sleep(40 * time.Millisecond)
	}
	if lk.Err() != nil {
		h.t.Errorf("A lost the lock across a restart with the AOF: %v", lk.Err())
	}
	_ = a.Release(ctx, lk)
	b.Cycle(ctx, k, time.Second, 2*time.Second, 1, 0)
}

// powerLoss: the AOF is copied just before A's grant, the server is killed
// and the copy put back (the writes of the last second lost, as everysec
// allows on power loss), and restarted. The lock and the fence increment
// are gone: B gets the key, with A's fence.
func powerLoss(h *harness) {
	ctx := h.t.Context()
	k := h.key("k")
	a := h.worker(h.lockNode(dlock.Options{}), true)
	b := h.worker(h.lockNode(dlock.Options{}), true)
	a.Cycle(ctx, k, time.Second, time.Second, 0, 0) // the fence counter exists from here
	sleep(1100 * time.Millisecond)                  // ...and is on disk
	aof := filepath.Join(h.lock.Dir, "appendonlydir")
	snap := filepath.Join(h.t.TempDir(), "appendonlydir")
	copyDir(h.t, aof, snap)
	lk := a.Acquire(ctx, k, 2*time.Second, false)
	if lk == nil {
		h.t.Fatal("A could not acquire")
	}
	a.Write(ctx, lk)
	h.nem.Do("power loss: SIGKILL, AOF rolled back <1s, restart", func() {
		if err := h.lock.Kill(); err != nil {
			h.t.Fatal(err)
		}
		if err := os.RemoveAll(aof); err != nil {
			h.t.Fatal(err)
		}
		copyDir(h.t, snap, aof)
		if err := h.lock.Restart(); err != nil {
			h.t.Fatal(err)
		}
	})
	var lb *dlock.Lock
	for i := 0; i < 100 && lb == nil; i++ {
		if lb = b.Acquire(ctx, k, 2*time.Second, false); lb == nil {
			sleep(5 * time.Millisecond)
		}
	}
	if lb == nil {
		h.t.Fatal("B could not acquire after the power loss")
	}
	b.Write(ctx, lb) // same fence as A's, another owner: the guard refuses it
	if valid(lk) {
		a.Write(ctx, lk)
	}
	select {
	case <-lk.Done():
	case <-time.After(3 * time.Second):
		h.t.Error("A never learnt it had lost the lock")
	}
	_ = b.Release(ctx, lb)
	_ = a.Release(ctx, lk)
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		src, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(to, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		src.Close()
		if err := dst.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// holderKill: a child holder is SIGKILLed; the queued waiters must get the
// lock within its TTL plus one retry (L2).
func holderKill(h *harness) {
	ctx := h.t.Context()
	k := h.key("k")
	const lease, pickup = 600 * time.Millisecond, 300 * time.Millisecond
	c := h.spawn(childConfig{Role: "squatter", LockAddr: h.lock.Addr(), ResAddr: resSrv.Addr(), Key: k,
		TTL: 400 * time.Millisecond, Fenced: true, Lease: lease, Pickup: pickup, PauseAt: -1})
	c.waitMark("acquired", 10*time.Second)
	c.waitMark("holding", 10*time.Second)
	opts := dlock.Options{WaiterLease: lease, PickupTimeout: pickup, RetryInterval: 200 * time.Millisecond}
	var wg sync.WaitGroup
	for range 2 {
		w := h.worker(h.lockNode(opts), true)
		wg.Go(func() { w.Cycle(ctx, k, 400*time.Millisecond, 5*time.Second, 1, 0) })
	}
	sleep(50*time.Millisecond + time.Duration(h.rng.IntN(200))*time.Millisecond)
	c.kill()
	wg.Wait()
}

// noActiveExpiry runs run with the server's active expiry off: expired keys
// are only removed when touched, so nothing but the waiters' own retries
// notices a crashed holder's key running out.
func noActiveExpiry(run func(h *harness)) func(h *harness) {
	return func(h *harness) {
		if err := h.client(h.lock.Addr(), true).Do(h.t.Context(), "debug", "set-active-expire", "0").Err(); err != nil {
			h.t.Fatal(err)
		}
		run(h)
	}
}

// herd: n waiters queue on one key; one release starts a chain of
// hand-offs. Each must cost O(1) server commands (L3).
func herd(n int, barging bool) func(h *harness) {
	return func(h *harness) {
		ctx := h.t.Context()
		k := h.key("k")
		nodes := make([]*node, 8)
		// Long leases: queued waiters do not refresh during the run, so
		// the count is what the hand-offs cost. Barging waiters (the
		// canary) also poll every 20ms, as a herd does: woken by releases
		// alone, a loaded machine let them take turns at 2.3 commands per
		// hand-off, under the bound the canary must break.
		retry := 5 * time.Second
		if barging {
			retry = 20 * time.Millisecond
		}
		for i := range nodes {
			nodes[i] = h.lockNode(dlock.Options{Barging: barging, RetryInterval: retry, WaiterLease: 30 * time.Second})
		}
		holder := h.worker(nodes[0], true)
		lk := holder.Acquire(ctx, k, 10*time.Second, false)
		if lk == nil {
			h.t.Fatal("holder could not acquire")
		}
		var wg sync.WaitGroup
		for i := range n {
			w := h.worker(nodes[i%len(nodes)], true)
			wg.Go(func() { w.Cycle(ctx, k, 10*time.Second, 60*time.Second, 0, 0) })
		}
		direct := h.client(h.lock.Addr(), true)
		waiting := func() int64 {
			if barging {
				var sum int64
				for _, n := range nodes {
					sum += n.Locks.Stats().Waiting
				}
				return sum
			}
			return direct.LLen(ctx, "dlock:{"+k+"}:q").Val()
		}
		for end := time.Now().Add(30 * time.Second); waiting() < int64(n); {
			if time.Now().After(end) {
				h.t.Fatalf("only %d of %d waiters queued", waiting(), n)
			}
			sleep(5 * time.Millisecond)
		}
		if barging {
			sleep(100 * time.Millisecond) // the last ones subscribed
		}
		from := clock.Now()
		_ = holder.Release(ctx, lk)
		wg.Wait()
		h.params.CommandsFrom, h.params.CommandsTo = from, clock.Now()
	}
}

// renewJitter: short leases renewed through a proxy whose latency jumps
// between 0 and 25ms each way every 20ms. Renewals race expiry; losses
// are fine, overlaps are not.
func renewJitter(h *harness) {
	ctx := h.t.Context()
	k := h.key("k")
	px := redistest.NewProxy(h.t, h.lock.Addr())
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for i := range 3 {
		w := h.worker(h.node(h.client(px.Addr(), false), dlock.Options{}), true)
		wg.Go(func() {
			for time.Now().Before(stop) {
				w.Cycle(ctx, k, 120*time.Millisecond, 400*time.Millisecond, 4, 15*time.Millisecond)
			}
		})
		_ = i
	}
	rng := rand.New(rand.NewPCG(h.rng.Uint64(), 7))
	start := clock.Now()
	for time.Now().Before(stop) {
		px.SetLatency(time.Duration(rng.IntN(26)) * time.Millisecond)
		sleep(20 * time.Millisecond)
	}
	px.SetLatency(0)
	h.nem.Span(kindFault, -1, "latency jitter 0-25ms", start, clock.Now())
	wg.Wait()
}

// waiterPause: a child waits first in the queue, an in-process waiter
// second; the child is stopped, the holder releases: the hand-off to the
// stopped child must lapse and pass on; resumed, the child must not act as
// a holder while the other one holds, and gets the lock after it.
func waiterPause(h *harness) {
	ctx := h.t.Context()
	k := h.key("k")
	const lease, pickup = 600 * time.Millisecond, 200 * time.Millisecond
	opts := dlock.Options{WaiterLease: lease, PickupTimeout: pickup}
	holder := h.worker(h.lockNode(opts), true)
	lk := holder.Acquire(ctx, k, 5*time.Second, false)
	if lk == nil {
		h.t.Fatal("holder could not acquire")
	}
	direct := h.client(h.lock.Addr(), true)
	queued := func(n int64) {
		for end := time.Now().Add(10 * time.Second); direct.LLen(ctx, "dlock:{"+k+"}:q").Val() < n; sleep(2 * time.Millisecond) {
			if time.Now().After(end) {
				h.t.Fatalf("fewer than %d waiters queued", n)
			}
		}
	}
	c := h.spawn(childConfig{Role: "holder", LockAddr: h.lock.Addr(), ResAddr: resSrv.Addr(), Key: k,
		TTL: time.Second, Writes: 2, Hold: 20 * time.Millisecond, PauseAt: -1, Fenced: true, Lease: lease, Pickup: pickup})
	queued(1)
	w := h.worker(h.lockNode(opts), true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Cycle(ctx, k, time.Second, 10*time.Second, 3, 100*time.Millisecond)
	}()
	queued(2)
	since := c.stop()
	_ = holder.Release(ctx, lk)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		h.t.Fatal("the second waiter never got the lock past the stopped one")
	}
	c.cont(since, "")
	c.waitMark("acquired", 10*time.Second)
	c.waitMark("done", 10*time.Second)
	c.wait(10 * time.Second)
}

// stallNoCtxTimeout: Lock calls with a 300ms context through a go-redis
// client without ContextTimeoutEnabled, while the server sleeps 1.5s: the
// call waits for the socket (ReadTimeout), past its context. README says
// to set ContextTimeoutEnabled; this shows why.
func stallNoCtxTimeout(h *harness) {
	ctx := h.t.Context()
	k := h.key("k")
	plain := redis.NewClient(&redis.Options{Addr: h.lock.Addr()})
	h.t.Cleanup(func() { _ = plain.Close() })
	w := h.worker(h.node(plain, dlock.Options{}), true)
	h.warm(w.Node)
	admin := h.client(h.lock.Addr(), true)
	var wg sync.WaitGroup
	wg.Go(func() {
		h.nem.Do("DEBUG SLEEP 1.5", func() { _ = admin.Do(ctx, "debug", "sleep", "1.5").Err() })
	})
	sleep(50 * time.Millisecond)
	w.Cycle(ctx, k, time.Second, 300*time.Millisecond, 1, 0)
	wg.Wait()
}

// uncheckedRelease (checker canary): A's lease runs out, B takes the key,
// then A "releases" with a script that deletes without comparing tokens,
// as naive unlock code does, or (topLevel) with a plain DEL. R1 must see it
// in the server's command log.
func uncheckedRelease(topLevel bool) func(h *harness) {
	return func(h *harness) { uncheckedReleaseRun(h, topLevel) }
}

func uncheckedReleaseRun(h *harness, topLevel bool) {
	ctx := h.t.Context()
	k := h.key("k")
	a := h.worker(h.lockNode(dlock.Options{}), true)
	b := h.worker(h.lockNode(dlock.Options{}), true)
	// A 100ms lease can run out before its reply arrives on a busy
	// machine (the acquire then fails): try again, a few times.
	var la *dlock.Lock
	for i := 0; la == nil && i < 5; i++ {
		la = a.Acquire(ctx, k, 100*time.Millisecond, false, dlock.WithoutRenewal())
	}
	if la == nil {
		h.t.Fatal("A could not acquire")
	}
	sleep(150 * time.Millisecond)
	lb := b.Acquire(ctx, k, 2*time.Second, false)
	if lb == nil {
		h.t.Fatal("B could not acquire")
	}
	if topLevel {
		if err := h.client(h.lock.Addr(), true).Del(ctx, k).Err(); err != nil {
			h.t.Fatal(err)
		}
	} else {
		naive := redis.NewScript("return redis.call('DEL', KEYS[1])")
		if err := naive.Run(ctx, h.client(h.lock.Addr(), true), []string{k}, la.Token()).Err(); err != nil {
			h.t.Fatal(err)
		}
	}
	h.nem.Span(kindFault, -1, "unchecked DEL by the expired holder", clock.Now(), clock.Now())
	_ = b.Release(ctx, lb)
}

// noCompensation (checker canary): a client sets the key for a token
// (as an acquire does) and never learns the outcome nor cleans up; a
// waiter is kept out until the TTL runs out. L4 must flag the orphan.
func noCompensation(h *harness) {
	ctx := h.t.Context()
	k := h.key("k")
	b := h.worker(h.lockNode(dlock.Options{}), true)
	h.warm(b.Node)
	raw := redis.NewScript("return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])")
	if err := raw.Run(ctx, h.client(h.lock.Addr(), true), []string{k}, "orphan-token-of-a-lost-reply", 3000).Err(); err != nil {
		h.t.Fatal(err)
	}
	h.nem.Span(kindFault, -1, "acquire applied, reply lost, no clean-up", clock.Now(), clock.Now())
	b.Cycle(ctx, k, time.Second, 5*time.Second, 1, 0)
}
