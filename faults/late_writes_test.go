package faults

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/redis/go-redis/v9"
)

// Writes that land late: a renewal, an operator's release or a Counter
// write delayed (faultcmd Late and Hold) until after a later command of
// the same lock, or after the lock changed hands, under the history
// checker. A late write must change nothing a later command decided: a
// short renewal must not cut a longer one short, an operator's release
// must not release a grant made after it was sent, a Counter write must
// not put back units sold after it was sent. And an operator's release of
// a semaphore must not grant above its callers' limit.

// TestLateWrites runs the late-write scenarios.
func TestLateWrites(t *testing.T) {
	for _, sc := range lateWriteScenarios() {
		t.Run(sc.topo+"/"+sc.name, func(t *testing.T) { runScenario(t, sc, sc.rounds) })
	}
}

func lateWriteScenarios() []scenario {
	const single = "single"
	return []scenario{
		{topo: single, name: "late short renewals", rounds: 1, run: lateShortRenewals,
			note: "Extend(300ms) lands after Extend(3s); Extend(200ms) lands after a watchdog renewal; a watchdog renewal held 500ms; B contends"},
		{topo: single, name: "late admin releases", rounds: 1, run: lateAdminReleases,
			note: "ReleaseToken and ForceRelease sent, caller told the reply was lost, landing after the holder released and re-acquired; B contends"},
		{topo: single, name: "admin release of a semaphore", rounds: 1, run: adminSemaphoreRelease,
			note: "limit 2, SetLimit(4) then SetLimit(0), 4 holders, 3 waiters: ReleaseToken of one holder, ForceRelease of all"},
		{topo: single, name: "late Counter writes", rounds: 1, run: lateCounterWrites,
			note: "a Set's writes held past a ForceRelease of a segment and a Take from it; a Take's write held past the next Take"},
	}
}

// Extend extends lk to ttl and records it. The Renew hook records it too,
// and the watchdog's renewals after it, all with the lease's TTL, which
// is ttl from then on if the Extend succeeded (an Extend whose outcome is
// unknown leaves it unchanged).
func (w *worker) Extend(ctx context.Context, lk *dlock.Lock, ttl time.Duration) error {
	owner, prev := lk.Token(), ttl
	h := w.Node.holdingOf(lk)
	if h != nil {
		owner = h.owner
		w.Node.mu.Lock()
		prev, h.ttl = h.ttl, ttl
		w.Node.mu.Unlock()
	}
	id, drift := w.id(), int64(w.Node.drift(ttl))
	sent := w.now()
	w.rec(event{Type: evInvoke, ID: id, T: sent, Kind: kindExtend, Key: lk.Key(), Owner: owner, TTL: int64(ttl)})
	err := lk.Extend(ctx, ttl)
	if err != nil && h != nil {
		w.Node.mu.Lock()
		h.ttl = prev
		w.Node.mu.Unlock()
	}
	e := event{Type: evOK, ID: id, T: w.now(), Kind: kindExtend, Key: lk.Key(), Owner: owner, TTL: int64(ttl),
		Drift: drift, Sent: sent, Deadline: w.Node.Clock.At(lk.Deadline())}
	switch {
	case errors.Is(err, dlock.ErrLost):
		e.Type, e.Err = evFail, errText(err)
	case err != nil:
		e.Type, e.Err = evInfo, errText(err)
	}
	w.rec(e)
	return err
}

// contend makes w try k with TryLock every 20ms until stop, each grant
// held 20ms with one write.
func contend(ctx context.Context, w *worker, k string, ttl time.Duration, stop time.Time) {
	for time.Now().Before(stop) && ctx.Err() == nil {
		w.Cycle(ctx, k, ttl, 0, 1, 0)
		sleep(20 * time.Millisecond)
	}
}

// holdAndWork makes a write under lk every 50ms until stop or until lk is
// no longer valid.
func holdAndWork(ctx context.Context, w *worker, lk *dlock.Lock, stop time.Time) {
	for time.Now().Before(stop) && valid(lk) && ctx.Err() == nil {
		w.Work(ctx, lk, 1, 0)
		sleep(50 * time.Millisecond)
	}
}

// lateLanding waits until a Late command of inj was sent (at most 5s).
func lateLanding(h *harness, inj *faultcmd.Injector, rule string) {
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); sleep(2 * time.Millisecond) {
		for _, e := range inj.Log() {
			if e.Rule == rule && e.Action == faultcmd.Late && strings.HasPrefix(e.Outcome, "sent") {
				return
			}
		}
	}
	h.t.Errorf("fault not shown: %q never landed", rule)
}

// lateShortRenewals: A holds k (TTL 2s, renewed); B tries k all along.
// An Extend(300ms) whose command is late lands after an Extend(3s); an
// Extend(200ms) lands after the watchdog's next renewal; a watchdog
// renewal is held 500ms. A writes while its lock is valid. If a late short
// renewal cut the key's TTL, B gets the key while A holds it (S1, S3).
func lateShortRenewals(h *harness) {
	ctx := h.t.Context()
	k := h.key("k")
	na, inj := h.cmdNode(dlock.Options{})
	a, b := h.worker(na, true), h.worker(h.lockNode(dlock.Options{}), true)
	const ttl = 2 * time.Second
	la := a.Acquire(ctx, k, ttl, false)
	if la == nil {
		h.t.Fatal("A could not acquire")
	}
	_ = a.Extend(ctx, la, ttl) // loads extend.lua: the late EVALSHA must find it
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	wg.Go(func() { contend(ctx, b, k, ttl, stop) })

	const r1, r2 = "Extend(300ms) lands after Extend(3s)", "Extend(200ms) lands after a watchdog renewal"
	inj.Add(faultcmd.Rule{Name: r1, Action: faultcmd.Late, Match: faultcmd.Match{Script: "extend", Key: k, Arg: "300"},
		Until: faultcmd.Match{Script: "extend", Key: k, Arg: "3000"}})
	_ = a.Extend(ctx, la, 300*time.Millisecond)
	_ = a.Extend(ctx, la, 3*time.Second)
	lateLanding(h, inj, r1)
	holdAndWork(ctx, a, la, time.Now().Add(700*time.Millisecond))

	inj.Add(faultcmd.Rule{Name: r2, Action: faultcmd.Late, Match: faultcmd.Match{Script: "extend", Key: k, Arg: "200"},
		Until: faultcmd.Match{Script: "extend_many", Key: k}})
	_ = a.Extend(ctx, la, 200*time.Millisecond)
	lateLanding(h, inj, r2)
	inj.Add(faultcmd.Rule{Name: "watchdog renewal held 500ms", Action: faultcmd.Delay, Delay: 500 * time.Millisecond,
		Match: faultcmd.Match{Script: "extend_many", Key: k}})
	holdAndWork(ctx, a, la, stop)
	_ = a.Release(ctx, la)
	wg.Wait()
}

// lateAdminReleases: A holds k; an operator's ReleaseToken of A's token,
// then (second round) a ForceRelease of k, is sent from A's Client and
// its caller told the reply was lost, while the command lands only once
// A has released and taken k again. B tries k all along. A late
// operator's release that releases A's new grant lets B in beside A.
func lateAdminReleases(h *harness) {
	ctx := h.t.Context()
	k := h.key("k")
	na, inj := h.cmdNode(dlock.Options{})
	a, b := h.worker(na, true), h.worker(h.lockNode(dlock.Options{}), true)
	const ttl = 2 * time.Second
	stop := time.Now().Add(2500 * time.Millisecond)
	var wg sync.WaitGroup
	wg.Go(func() { contend(ctx, b, k, ttl, stop) })
	for i, admin := range []struct {
		name, arg string
		call      func(token string) error
	}{
		{"ReleaseToken", "0", func(token string) error { return na.Admin.ReleaseToken(ctx, k, token) }},
		{"ForceRelease", "force", func(string) error { _, err := na.Admin.ForceRelease(ctx, k); return err }},
	} {
		la := acquireSoon(ctx, a, k, ttl)
		if la == nil {
			h.t.Fatalf("round %d: A could not acquire", i)
		}
		rule := admin.name + " lands after A took the lock again"
		inj.Add(faultcmd.Rule{Name: rule, Action: faultcmd.Late, Match: faultcmd.Match{Script: "release", Key: k, Arg: admin.arg},
			Until: faultcmd.Match{Script: "acquire", Key: k}})
		if err := admin.call(la.Token()); !errors.Is(err, dlock.ErrUnavailable) {
			h.t.Errorf("%s with its command late = %v, want ErrUnavailable", admin.name, err)
		}
		_ = a.Release(ctx, la)
		la2 := acquireSoon(ctx, a, k, ttl)
		if la2 == nil {
			h.t.Fatalf("round %d: A could not acquire again", i)
		}
		lateLanding(h, inj, rule)
		holdAndWork(ctx, a, la2, time.Now().Add(500*time.Millisecond))
		_ = a.Release(ctx, la2)
	}
	wg.Wait()
}

// acquireSoon takes k with Lock, waiting at most 2s (B may hold it).
func acquireSoon(ctx context.Context, w *worker, k string, ttl time.Duration) *dlock.Lock {
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return w.Acquire(actx, k, ttl, true)
}

// adminUnlock records an operator's release of the grants of owners as
// their Unlock: from the call on, their holders no longer hold them (the
// release counts as theirs). It returns the events' completion.
func adminUnlock(h *harness, k string, owners []string) func(err error) {
	proc := h.nextProc()
	ids := make([]uint64, len(owners))
	t := clock.Now()
	for i, o := range owners {
		ids[i] = uint64(proc+1)<<40 | uint64(i+1)
		h.hist.Record(event{Type: evInvoke, ID: ids[i], Proc: proc, T: t, Kind: kindUnlock, Key: k, Owner: o})
	}
	return func(err error) {
		e := event{Type: evOK, Proc: proc, T: clock.Now(), Kind: kindUnlock, Key: k}
		if err != nil {
			e.Type, e.Err = evInfo, errText(err)
		}
		for _, id := range ids {
			e.ID = id
			h.hist.Record(e)
		}
	}
}

// forget drops lk from the history's bookkeeping and unlocks it without
// recording: an operator released it (adminUnlock recorded that).
func forget(ctx context.Context, w *worker, lk *dlock.Lock) {
	if hd := w.Node.holdingOf(lk); hd != nil {
		w.Node.remove(hd)
	}
	_ = lk.Unlock(ctx)
}

// adminSemaphoreRelease: a semaphore its callers give limit 2 holds 4
// permits, taken under a stored limit of 4 that was then removed; 3
// waiters queue. An operator's ReleaseToken of one holder must not grant a
// waiter (3 permits stay in use), and a ForceRelease of every holder must
// grant at most 2. The model (S3) judges every grant against the limit,
// counting the released holders out from the operator's call on.
func adminSemaphoreRelease(h *harness) {
	ctx := h.t.Context()
	k := h.key("sem")
	n, admin := h.lockNode(dlock.Options{}), h.lockNode(dlock.Options{})
	var seq atomic.Uint64
	spec := semSpec(2, 1)
	setLimit(ctx, h, n, h.nextProc(), &seq, k, 4)
	type held struct {
		w  *worker
		lk *dlock.Lock
	}
	var holders []held
	for range 4 {
		w := h.worker(n, false)
		if lk := w.AcquireSpec(ctx, k, 5*time.Second, false, spec, dlock.WithoutRenewal()); lk != nil {
			holders = append(holders, held{w, lk})
		}
	}
	setLimit(ctx, h, n, h.nextProc(), &seq, k, 0)
	if len(holders) < 3 {
		h.t.Fatalf("%d holders, want 4", len(holders))
	}
	wctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 3 {
		w := h.worker(h.lockNode(dlock.Options{}), false)
		wg.Go(func() {
			if lk := w.AcquireSpec(wctx, k, 5*time.Second, true, spec); lk != nil {
				sleep(300 * time.Millisecond)
				_ = w.Release(context.WithoutCancel(ctx), lk)
			}
		})
		h.waitQueued(k, int64(i+1))
	}
	owner := func(x held) string { return x.w.Node.holdingOf(x.lk).owner }
	done := adminUnlock(h, k, []string{owner(holders[0])})
	done(admin.Admin.ReleaseToken(ctx, k, holders[0].lk.Token()))
	forget(ctx, holders[0].w, holders[0].lk)
	sleep(300 * time.Millisecond) // a waiter granted above the limit works meanwhile
	var rest []string
	for _, x := range holders[1:] {
		rest = append(rest, owner(x))
	}
	done = adminUnlock(h, k, rest)
	_, err := admin.Admin.ForceRelease(ctx, k)
	done(err)
	for _, x := range holders[1:] {
		forget(ctx, x.w, x.lk)
	}
	wg.Wait()
}

// lateCounterWrites: a Counter of 4 segments with a stock of 40. A Set of
// the same stock holds every segment's lock; its writes are held until a
// Take of the same Client has taken a unit from segment 0, whose lock an
// operator force-released meanwhile. Then a Take's write is sent late,
// landing after the next Take of that segment. Sold + left must never
// exceed the stock (S2): a late Set would put the sold unit back on sale.
func lateCounterWrites(h *harness) {
	ctx := h.t.Context()
	name := h.key("counter")
	na, inj := h.cmdNode(dlock.Options{})
	admin := h.lockNode(dlock.Options{})
	c := na.Locks.Counter(name, 4)
	const stock = 40
	if err := c.Set(ctx, stock); err != nil {
		h.t.Fatalf("Set: %v", err)
	}
	var sold atomic.Int64
	sell := func(context.Context, int) error { sold.Add(1); return nil }
	seg0 := name + ":0"
	count := "dlock:{" + name + ":"
	setWrite := inj.Add(faultcmd.Rule{Name: "Set's writes held past a Take", Action: faultcmd.Hold, HoldTimeout: 3 * time.Second,
		Match: faultcmd.Match{Func: func(c faultcmd.Command) bool {
			return c.Script == "counter_set" || c.Name == "set" && strings.HasPrefix(c.Key, count)
		}},
		Until: faultcmd.Match{Script: "counter_add", Key: seg0}})
	setDone := make(chan error, 1)
	go func() { setDone <- c.Set(ctx, stock) }()
	select {
	case <-setWrite.FiredC():
	case <-time.After(5 * time.Second):
		h.t.Fatal("fault not shown: the Set's writes were never held")
	}
	if _, err := admin.Admin.ForceRelease(ctx, seg0); err != nil {
		h.t.Errorf("ForceRelease of segment 0: %v", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	seg, err := c.Take(tctx, 1, sell)
	cancel()
	if err != nil || seg != 0 {
		h.t.Errorf("Take beside the held Set = segment %d, %v; want segment 0", seg, err)
	}
	<-setDone // its error, if any, is the fix at work

	const r = "a Take's write lands after the next Take"
	inj.Add(faultcmd.Rule{Name: r, Action: faultcmd.Late, Match: faultcmd.Match{Script: "counter_add"},
		Until: faultcmd.Match{Script: "counter_add"}})
	for range 2 {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, _ = c.Take(tctx, 1, sell)
		cancel()
	}
	lateLanding(h, inj, r)
	left, err := c.Total(ctx)
	if err != nil {
		h.t.Fatalf("Total: %v", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.extra.Counter = append(h.extra.Counter, counterRun{Stock: stock, Sold: sold.Load(), Left: left})
	if n := sold.Load() + left - stock; n > 0 {
		h.extra.StaleAccepted += int(n)
		h.extra.add(invS2, int(n), "counter %s: stock %d, sold %d, %d left: %d unit(s) sold twice", name, stock, sold.Load(), left, n)
	}
}

// probeLanded waits until a Late command of inj was sent (at most 3s).
func probeLanded(inj *faultcmd.Injector) bool {
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		for _, e := range inj.Log() {
			if e.Action == faultcmd.Late && strings.HasPrefix(e.Outcome, "sent") {
				return true
			}
		}
	}
	return false
}

// pendingRenewalGT (issue 28, defect 1): an Extend(1s) landing after an
// Extend(30s) must not cut the key's TTL.
func pendingRenewalGT(t *testing.T) string {
	c, _, inj, done := faultyProbeClient(t)
	defer done()
	rdb, stop := probeRDB()
	defer stop()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	k := probeKey(t, "renew-gt")
	lk, err := c.TryLock(ctx, k, dlock.WithTTL(10*time.Second), dlock.WithoutRenewal())
	if err != nil {
		return ""
	}
	defer func() { _ = lk.Unlock(context.WithoutCancel(ctx)) }()
	if lk.Extend(ctx, 10*time.Second) != nil { // loads extend.lua
		return ""
	}
	inj.Add(faultcmd.Rule{Action: faultcmd.Late, Match: faultcmd.Match{Script: "extend", Key: k, Arg: "1000"},
		Until: faultcmd.Match{Script: "extend", Key: k, Arg: "30000"}})
	_ = lk.Extend(ctx, time.Second)
	if lk.Extend(ctx, 30*time.Second) != nil || !probeLanded(inj) {
		return ""
	}
	if rdb.PTTL(ctx, k).Val() < 5*time.Second {
		return "a late short renewal cuts the lease"
	}
	return ""
}

// pendingForceLate: a ForceRelease that lands after the key changed hands
// leaves the new holder alone (found by the late admin releases row).
func pendingForceLate(t *testing.T) string {
	c, adm, inj, done := faultyProbeClient(t)
	defer done()
	rdb, stop := probeRDB()
	defer stop()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	k := probeKey(t, "force-late")
	lk, err := c.TryLock(ctx, k)
	if err != nil {
		return ""
	}
	inj.Add(faultcmd.Rule{Action: faultcmd.Late, Match: faultcmd.Match{Script: "release", Key: k, Arg: "force"},
		Until: faultcmd.Match{Script: "acquire", Key: k}})
	_, _ = adm.ForceRelease(ctx, k)
	_ = lk.Unlock(ctx)
	lk2, err := c.TryLock(ctx, k)
	if err != nil {
		return ""
	}
	defer func() { _ = lk2.Unlock(context.WithoutCancel(ctx)) }()
	if !probeLanded(inj) {
		return ""
	}
	if rdb.Get(ctx, k).Val() != lk2.Token() {
		return "a late ForceRelease releases a grant made after it was sent"
	}
	return ""
}

// pendingAdminSemLimit (issue 28, defect 2): with the stored limit
// removed, an admin release of a semaphore does not grant above the
// callers' limit.
func pendingAdminSemLimit(t *testing.T) string {
	c, crdb, done := probeClient(t)
	defer done()
	rdb, stop := probeRDB()
	defer stop()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	k := probeKey(t, "sem-admin")
	s := c.Semaphore(k, 2)
	if s.SetLimit(ctx, 4) != nil {
		return ""
	}
	var lks []*dlock.Lock
	defer func() {
		for _, lk := range lks {
			_ = lk.Unlock(context.WithoutCancel(ctx))
		}
	}()
	for range 4 {
		if lk, err := s.TryAcquire(ctx, 1, dlock.WithoutRenewal()); err == nil {
			lks = append(lks, lk)
		}
	}
	if len(lks) != 4 || s.SetLimit(ctx, 0) != nil {
		return ""
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() {
		if lk, err := s.Acquire(wctx, 1); err == nil {
			_ = lk.Unlock(context.WithoutCancel(ctx))
		}
	}()
	for end := time.Now().Add(2 * time.Second); rdb.LLen(ctx, "dlock:{"+k+"}:q").Val() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			return ""
		}
	}
	if adminOn(t, crdb).ReleaseToken(ctx, k, lks[0].Token()) != nil {
		return ""
	}
	if n := rdb.ZCard(ctx, k).Val(); n > 3 {
		return "an admin release grants a semaphore above its callers' limit"
	}
	return ""
}

// pendingCounterSet (issue 28, defect 4): a Counter.Set whose writes land
// after its segment's lock was force-released and a unit taken leaves
// that sale alone.
func pendingCounterSet(t *testing.T) string {
	c, _, inj, done := faultyProbeClient(t)
	defer done()
	_, oprdb, doneOp := probeClient(t)
	defer doneOp()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	name := probeKey(t, "counter-set")
	ctr := c.Counter(name, 1)
	if ctr.Set(ctx, 2) != nil {
		return ""
	}
	hold := inj.Add(faultcmd.Rule{Action: faultcmd.Hold, HoldTimeout: 2 * time.Second,
		Match: faultcmd.Match{Func: func(c faultcmd.Command) bool {
			return c.Script == "counter_set" || c.Name == "set" && strings.HasSuffix(c.Key, ":count")
		}},
		Until: faultcmd.Match{Script: "counter_add"}})
	setDone := make(chan struct{})
	go func() { _ = ctr.Set(ctx, 2); close(setDone) }()
	select {
	case <-hold.FiredC():
	case <-ctx.Done():
		return ""
	}
	_, _ = adminOn(t, oprdb).ForceRelease(ctx, name+":0")
	if _, err := ctr.Take(ctx, 1, nil); err != nil {
		return ""
	}
	<-setDone
	if left, err := ctr.Total(ctx); err == nil && left > 1 {
		return "a Counter.Set that lands late puts sold units back"
	}
	return ""
}

// probeRDB is a plain client of the probes' server.
func probeRDB() (*redis.Client, func()) {
	rdb := redis.NewClient(&redis.Options{Addr: resSrv.Addr()})
	return rdb, func() { _ = rdb.Close() }
}
