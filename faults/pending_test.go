package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/legacy"
	"github.com/redis/go-redis/v9"
)

// Probes of fixes a scenario depends on. Each runs against the resource's
// server (never faulted) on keys of its own, and returns "" when the fix is
// in this build, else what is missing. A scenario whose scenario.pending is
// a probe can land before the fix of the defect it finds: until then its
// row shows the violations as pending (DLOCK_FAULTS_STRICT=1 fails on them
// anyway). Once the fixes are in, the scenarios are judged as usual and
// TestFixesPresent keeps every probe as a small regression check.

func probeClient(t *testing.T) (*dlock.Client, *redis.Client, func()) {
	rdb := redis.NewClient(&redis.Options{Addr: resSrv.Addr(), ContextTimeoutEnabled: true})
	c, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, rdb, func() { _ = c.Close(); _ = rdb.Close() }
}

// pendingReservedNames: a lock key that is another lock's auxiliary name,
// and a prefix that aliases, are refused.
func pendingReservedNames(t *testing.T) string {
	c, rdb, done := probeClient(t)
	defer done()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var why []string
	lk, err := c.TryLock(ctx, "dlock:{fk-probe}:q")
	if lk != nil {
		_ = lk.Unlock(ctx)
	}
	if !errors.Is(err, dlock.ErrInvalidArgument) {
		why = append(why, "reserved auxiliary names not refused")
	}
	if p, err := dlock.New(rdb, dlock.Options{Prefix: "dlock:#x"}); err == nil {
		_ = p.Close()
		why = append(why, "aliasing prefixes not refused")
	}
	return strings.Join(why, ", ")
}

// pendingReentrantIdentity: a reentrant owner named after a plain
// holder's token does not join its lock.
func pendingReentrantIdentity(t *testing.T) string {
	c, _, done := probeClient(t)
	defer done()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	k := "fk-probe:reentrant:" + t.Name()
	lk, err := c.TryLock(ctx, k)
	if err != nil {
		return ""
	}
	defer func() { _ = lk.Unlock(context.WithoutCancel(ctx)) }()
	r, err := c.Reentrant(k).TryLock(ctx, lk.Token())
	if err == nil {
		_ = r.Unlock(ctx)
		return "a reentrant owner equal to a token joins its lock"
	}
	return ""
}

// faultyProbeClient is probeClient with a command-fault layer.
func faultyProbeClient(t *testing.T) (*dlock.Client, *admin.Client, *faultcmd.Injector, func()) {
	rdb := redis.NewClient(&redis.Options{Addr: resSrv.Addr(), ContextTimeoutEnabled: true})
	inj := faultcmd.New()
	rdb.AddHook(inj)
	c, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, adminOn(t, rdb), inj, func() { _ = c.Close(); _ = rdb.Close() }
}

// adminOn returns the admin Client of the locks under the default prefix
// over rdb.
func adminOn(t testing.TB, rdb redis.UniversalClient) *admin.Client {
	t.Helper()
	adm, err := admin.New(rdb, admin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return adm
}

func probeKey(t *testing.T, what string) string {
	return fmt.Sprintf("fk-probe:%s:%d", what, time.Now().UnixNano())
}

// pendingLegacyLostSetnx (issue 12, defect 2): a legacy SETNX whose reply
// is lost while another client holds the key with the same value (same
// second, same TTL) must not delete that client's lock.
func pendingLegacyLostSetnx(t *testing.T) string {
	b, _, doneB := probeClient(t)
	defer doneB()
	a, _, inj, doneA := faultyProbeClient(t)
	defer doneA()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	p := dlock.WithProtocol(legacy.New(legacy.Options{Unit: legacy.Seconds}))
	direct := redis.NewClient(&redis.Options{Addr: resSrv.Addr()})
	defer direct.Close()
	for range 3 {
		k := probeKey(t, "legacy-setnx")
		inj.Clear()
		inj.Add(faultcmd.Rule{Action: faultcmd.DropReply, Match: faultcmd.Match{Cmd: "setnx", Key: k}})
		sec := time.Now().Unix()
		lb, err := b.TryLock(ctx, k, p, dlock.WithTTL(3*time.Second), dlock.WithoutRenewal())
		if err != nil {
			return ""
		}
		_, _ = a.TryLock(ctx, k, p, dlock.WithTTL(3*time.Second), dlock.WithoutRenewal())
		if time.Now().Unix() != sec {
			_ = lb.Unlock(ctx)
			continue // not the same second: try again
		}
		time.Sleep(200 * time.Millisecond) // the background clean-up
		n := direct.Exists(ctx, k).Val()
		_ = lb.Unlock(ctx)
		if n == 0 {
			return "a lost legacy SETNX reply deletes another client's lock"
		}
		return ""
	}
	return ""
}

// pendingCounterRestock (issue 12, defect 7): an Unlock error after fn
// committed must not put the units back.
func pendingCounterRestock(t *testing.T) string {
	c, _, inj, done := faultyProbeClient(t)
	defer done()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	name := probeKey(t, "counter")
	ctr := c.Counter(name, 1)
	if ctr.Set(ctx, 1) != nil {
		return ""
	}
	inj.Add(faultcmd.Rule{Action: faultcmd.DropReply, Match: faultcmd.Match{Script: "release", Key: name + ":0"}})
	_, err := ctr.Take(ctx, 1, func(context.Context, int) error { return nil })
	left, _ := ctr.Total(ctx)
	if err != nil && left > 0 {
		return "Counter.Take puts sold units back after an Unlock error"
	}
	return ""
}

// pendingUnlockMisreport (issue 12, defect 6): Unlock retried after a lost
// reply, the first having handed the key to a queued waiter, must not
// report a loss.
func pendingUnlockMisreport(t *testing.T) string {
	a, _, inj, doneA := faultyProbeClient(t)
	defer doneA()
	w, rdb, doneW := probeClient(t)
	defer doneW()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	k := probeKey(t, "unlock")
	lk, err := a.TryLock(ctx, k)
	if err != nil {
		return ""
	}
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, _ := w.Lock(ctx, k)
		got <- l
	}()
	for end := time.Now().Add(2 * time.Second); rdb.LLen(ctx, "dlock:{"+k+"}:q").Val() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			return ""
		}
	}
	inj.Add(faultcmd.Rule{Action: faultcmd.DropReply, Match: faultcmd.Match{Script: "release", Key: k}})
	err = lk.Unlock(ctx)
	if err != nil {
		err = lk.Unlock(ctx)
	}
	if l := <-got; l != nil {
		_ = l.Unlock(ctx)
	}
	if errors.Is(err, dlock.ErrLost) {
		return "an Unlock retried after a lost reply reports a loss"
	}
	return ""
}

// TestFixesPresent runs every probe: each is a small deterministic
// reproduction, at the suite's level, of a defect its scenario was written
// to catch; none may find its defect in this build.
func TestFixesPresent(t *testing.T) {
	for _, p := range []struct {
		name  string
		probe func(*testing.T) string
	}{
		{"reserved names", pendingReservedNames}, {"reentrant identity", pendingReentrantIdentity},
		{"legacy lost SETNX", pendingLegacyLostSetnx}, {"counter restock", pendingCounterRestock},
		{"unlock misreport", pendingUnlockMisreport}, {"withdraw retry", pendingWithdrawRetry},
		{"pause points", pendingPausePoints}, {"queue TTL", pendingQueueTTL},
		{"late confirm", pendingLateConfirm}, {"fences from the clock", pendingFenceClock},
		{"late ForceRelease", pendingForceLate}, {"admin semaphore limit", pendingAdminSemLimit},
		{"late short renewal", pendingRenewalGT}, {"late Counter.Set", pendingCounterSet},
	} {
		if why := p.probe(t); why != "" {
			t.Errorf("%s: %s", p.name, why)
		}
	}
}

// pendingWithdrawRetry (issue 12, defect 1): a token given up (its
// clean-up queued) is never granted again. Probed on the engine's side:
// a queued waiter whose confirm reply is lost retries; the withdraw is
// held until that retry completes; the key must not be freed under it.
func pendingWithdrawRetry(t *testing.T) string {
	a, _, inj, doneA := faultyProbeClient(t)
	defer doneA()
	d, rdb, doneD := probeClient(t)
	defer doneD()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	k := probeKey(t, "withdraw")
	ld, err := d.TryLock(ctx, k)
	if err != nil {
		return ""
	}
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, _ := a.Lock(ctx, k)
		got <- l
	}()
	for end := time.Now().Add(2 * time.Second); rdb.LLen(ctx, "dlock:{"+k+"}:q").Val() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			return ""
		}
	}
	inj.Add(faultcmd.Rule{Action: faultcmd.DropReply, Match: faultcmd.Match{Script: "acquire", Key: k}})
	hold := inj.Add(faultcmd.Rule{Action: faultcmd.Hold, Match: faultcmd.Match{Script: "release", Key: k},
		Until: faultcmd.Match{Script: "acquire", Key: k}, HoldTimeout: time.Second})
	_ = ld.Unlock(ctx)
	la := <-got
	if la == nil {
		return ""
	}
	defer func() { _ = la.Unlock(ctx) }()
	for end := time.Now().Add(1500 * time.Millisecond); hold.Fired() == 0 && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the withdraw landed
	if v := rdb.Get(ctx, k).Val(); la.Err() == nil && v != la.Token() {
		return "a withdrawn token is granted again"
	}
	return ""
}

// pendingPausePoints: the engine calls its pause points (a lock that is
// granted passes AfterGrant).
func pendingPausePoints(t *testing.T) string {
	c, _, done := probeClient(t)
	defer done()
	var n atomic.Int64
	restore := probe.Set(func(string, string) { n.Add(1) })
	defer restore()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if lk, err := c.TryLock(ctx, probeKey(t, "points")); err == nil {
		_ = lk.Unlock(ctx)
	}
	if n.Load() == 0 {
		return "the engine's pause points are not in this build"
	}
	return ""
}

// pendingQueueTTL (issue 12, defect 5): the wait queue expires with its
// last waiter.
func pendingQueueTTL(t *testing.T) string {
	a, rdb, done := probeClient(t)
	defer done()
	b, _, doneB := probeClient(t)
	defer doneB()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	k := probeKey(t, "queue")
	lk, err := a.TryLock(ctx, k)
	if err != nil {
		return ""
	}
	defer func() { _ = lk.Unlock(context.WithoutCancel(ctx)) }()
	wctx, wcancel := context.WithCancel(ctx)
	go func() { _, _ = b.Lock(wctx, k) }()
	defer wcancel()
	q := "dlock:{" + k + "}:q"
	for end := time.Now().Add(2 * time.Second); rdb.LLen(ctx, q).Val() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			return ""
		}
	}
	if rdb.PTTL(ctx, q).Val() < 0 {
		return "the wait queue has no TTL"
	}
	return ""
}

// fenceNote: what the fence-repeating canaries check besides their limit.
const fenceNote = "; fences drawn from the server's clock keep increasing (S2 must be 0)"

// pendingFenceClock (issue 12, defect 8): every fence is max(counter + 1,
// the server's TIME in µs), so a promoted replica or a rolled-back AOF
// with a stale counter still hands out increasing fences (the failover and
// power-loss canaries then show no repeated fence). A counter set to 5
// must not give fence 6.
func pendingFenceClock(t *testing.T) string {
	c, rdb, done := probeClient(t)
	defer done()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	k := probeKey(t, "fence")
	if err := rdb.Set(ctx, "dlock:{"+k+"}:fence", 5, time.Minute).Err(); err != nil {
		return ""
	}
	lk, err := c.TryLock(ctx, k)
	if err != nil {
		return ""
	}
	defer func() { _ = lk.Unlock(ctx) }()
	if lk.Fence() <= 6 {
		return "fences are not drawn from the server's clock"
	}
	return ""
}

// pendingLateConfirm (issue 12, defect 4): a waiter whose hand-off lapsed
// (its confirm came after PickupTimeout) is back in the queue at once.
func pendingLateConfirm(t *testing.T) string {
	if why := pendingPausePoints(t); why != "" {
		return why
	}
	opts := dlock.Options{PickupTimeout: 100 * time.Millisecond, WaiterLease: 30 * time.Second}
	mk := func() (*dlock.Client, func()) {
		rdb := redis.NewClient(&redis.Options{Addr: resSrv.Addr(), ContextTimeoutEnabled: true})
		c, err := dlock.New(rdb, opts)
		if err != nil {
			t.Fatal(err)
		}
		return c, func() { _ = c.Close(); _ = rdb.Close() }
	}
	a, da := mk()
	defer da()
	w, dw := mk()
	defer dw()
	x, dx := mk()
	defer dx()
	direct := redis.NewClient(&redis.Options{Addr: resSrv.Addr()})
	defer direct.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	k := probeKey(t, "confirm")
	q := "dlock:{" + k + "}:q"
	queued := func(n int64) bool {
		for end := time.Now().Add(2 * time.Second); direct.LLen(ctx, q).Val() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				return false
			}
		}
		return true
	}
	la, err := a.TryLock(ctx, k)
	if err != nil {
		return ""
	}
	var fired atomic.Bool
	restore := probe.Set(func(name, key string) {
		if name == probe.BeforeConfirm && key == k && fired.CompareAndSwap(false, true) {
			time.Sleep(300 * time.Millisecond)
		}
	})
	defer restore()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	var wGot atomic.Bool // W got the lock (at its late confirm, if the key was free by then)
	go func() {
		if l, err := w.Lock(wctx, k); err == nil {
			wGot.Store(true)
			_ = l.Unlock(context.WithoutCancel(ctx))
		}
	}()
	if !queued(1) {
		return ""
	}
	xl := make(chan *dlock.Lock, 1)
	go func() {
		l, _ := x.Lock(wctx, k)
		xl <- l
	}()
	if !queued(2) {
		return ""
	}
	_ = la.Unlock(ctx)
	var lx *dlock.Lock
	select {
	case lx = <-xl:
	case <-ctx.Done():
	}
	if lx == nil {
		return ""
	}
	time.Sleep(400 * time.Millisecond) // W's late confirm has come back
	n := direct.LLen(ctx, q).Val()
	_ = lx.Unlock(ctx)
	if fired.Load() && n == 0 && !wGot.Load() {
		return "a waiter whose hand-off lapsed is left out of the queue"
	}
	return ""
}

// pendingDeclaredKeys: every key a script touches is in its KEYS. In a
// Cluster, a script that touches an undeclared key of a migrating slot
// fails mid-way, after writes Redis does not roll back (a release that
// freed the key but wrote no tombstone, re-sent, reports the lock lost).
// Probed by its most common case: a released token's tombstone is in the
// lock's declared tombstone set, not a key of its own whose name the
// release script builds.
func pendingDeclaredKeys(t *testing.T) string {
	c, rdb, done := probeClient(t)
	defer done()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	k := probeKey(t, "declared")
	lk, err := c.TryLock(ctx, k)
	if err != nil {
		return ""
	}
	if err := lk.Unlock(ctx); err != nil {
		return ""
	}
	if n, err := rdb.Exists(ctx, "dlock:{"+k+"}:q:"+lk.Token()).Result(); err == nil && n > 0 {
		return "scripts build key names they do not declare (a released token's tombstone key)"
	}
	if err := rdb.ZScore(ctx, "dlock:{"+k+"}:tombs", lk.Token()).Err(); err != nil {
		return "a released token's tombstone is not in the lock's tombstone set"
	}
	return ""
}
