// renew.go owns the watchdog's renewals: dispatching due leases to
// batches, claiming each lease, sending a batch (or a DirectProtocol's
// renewals) and applying the replies, the back-off after an error, putting
// leases back in the renewal heap, and the "falling behind" warning.

package engine

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/protocol"
)

// behindLocked warns (at most once a second) when a renewal waits for a
// free pipeline, or is sent, more than half an interval after it was due:
// the watchdog is falling behind, and locks would be lost if it went on.
func (wd *watchdog) behindLocked(now, lag int64, due []*Lease) {
	var limit int64
	if len(due) > 0 {
		limit = due[0].wd.every / 2
	} else {
		limit = wd.renewQ.Top().wd.every / 2
	}
	wd.warnLocked(now, lag, limit, len(due))
}

// warnLocked gives the "falling behind" warning if lag is limit or more,
// at most once a second; waiting is BehindInfo.Waiting.
func (wd *watchdog) warnLocked(now, lag, limit int64, waiting int) {
	if lag < limit || (wd.lastWarn != 0 && now-wd.lastWarn < int64(time.Second)) {
		return
	}
	wd.lastWarn = now
	info := BehindInfo{Held: wd.held, Waiting: waiting, Lag: time.Duration(lag)}
	wd.e.Stats.Behind.Add(1)
	go func() { // not under wd.mu: the hook and the logger may be slow
		wd.e.log.Warn("dlock: renewals are falling behind: locks may be lost; hold fewer locks per Client, raise their TTL or give Redis and this process more CPU",
			"held", info.Held, "waiting", info.Waiting, "late", info.Lag)
		if h := wd.e.hooksNow().Behind; h != nil {
			h(context.Background(), info)
		}
	}()
}

// replyLate warns, as behindLocked does, that a batch of n renewals took
// late, more than half its renewal interval every, to be answered.
func (wd *watchdog) replyLate(late time.Duration, n int, every int64) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	wd.warnLocked(wd.now(), int64(late), every/2, n)
}

// dispatch starts the batches of due (take counted them in inflight).
func (wd *watchdog) dispatch(due []*Lease) {
	var direct []*Lease
	batch := due[:0:0]
	for _, l := range due {
		if l.direct() {
			direct = append(direct, l)
		} else {
			batch = append(batch, l)
		}
	}
	nb := 0
	if len(batch) > 0 {
		wd.start(batch, wd.renew)
		nb++
	}
	if len(direct) > 0 {
		wd.start(direct, wd.renewDirect)
		nb++
	}
	// take counted one slot: adjust for a split into direct and batched
	// leases.
	if spare := 1 - nb; spare != 0 {
		wd.mu.Lock()
		wd.inflight -= spare
		wd.mu.Unlock()
	}
}

func (wd *watchdog) start(leases []*Lease, run func([]*Lease)) {
	wd.batches.Add(1)
	go func() {
		defer wd.batches.Done()
		run(leases)
		wd.mu.Lock()
		wd.inflight--
		wd.mu.Unlock()
		wd.kick()
	}()
}

// requeue puts a lease back in the renewal heap after a batch, at its
// next renewal time, unless it was unregistered meanwhile.
func (wd *watchdog) requeue(l *Lease) {
	l.mu.Lock()
	st := wd.queueState(l)
	wd.mu.Lock()
	top := wd.requeueLocked(l, st)
	wd.mu.Unlock()
	l.mu.Unlock()
	if top {
		wd.kick()
	}
}

// requeueHeld is requeue for a batch's leases, taking wd.mu once per 64
// of them. Callers hold every lease's opMu: nothing moves their deadline
// or renewal time between the read and the push.
func (wd *watchdog) requeueHeld(ls []*Lease) {
	sts := make([]queueState, len(ls))
	for i, l := range ls {
		l.mu.Lock()
		sts[i] = wd.queueState(l)
		l.mu.Unlock()
	}
	top := false
	for i := 0; i < len(ls); i += 64 { // Lock and Unlock get wd.mu between chunks
		wd.mu.Lock()
		for j := i; j < min(i+64, len(ls)); j++ {
			top = wd.requeueLocked(ls[j], sts[j]) || top
		}
		wd.mu.Unlock()
	}
	if top {
		wd.kick()
	}
}

// queueState is what requeue reads of a lease (under its mu).
type queueState struct {
	held, failing   bool
	rAt, every, dAt int64
}

func (wd *watchdog) queueState(l *Lease) queueState {
	return queueState{held: l.state == stateHeld, failing: l.renewErr != nil,
		rAt: wd.at(l.nextRenew), every: int64(wd.e.timing.RenewEvery(l.ttl)), dAt: wd.at(l.deadline)}
}

// requeueLocked applies st to l's heap entries and reports whether l
// became the top of the renewal heap. Callers hold wd.mu.
func (wd *watchdog) requeueLocked(l *Lease, st queueState) bool {
	e := &l.wd
	if e.di >= 0 && st.dAt > e.dAt {
		// A renewal moved the deadline later: its heap item stays where it
		// is, and take puts it back at this deadline when it comes up.
		e.dAt = st.dAt
	}
	if st.held && e.reg && e.ri < 0 {
		e.rAt, e.every, e.failing = st.rAt, st.every, st.failing
		return wd.renewQ.Push(e.rAt, l)
	}
	return false
}

// claim takes a due lease's op mutex for a batch. A lease busy with an
// Extend or an Unlock is not waited for (the rest of the batch would wait
// with it): it is looked at again shortly. A lease whose renewal an Extend
// moved later goes back to wait for it. mark: the caller sends the
// renewal itself, in flight from now until renewed applies its reply.
func (wd *watchdog) claim(l *Lease, now time.Time, mark bool) (ttl time.Duration, deadline time.Time, token string, ok bool) {
	if !l.opMu.TryLock() {
		l.mu.Lock()
		if !l.nextRenew.After(now) {
			l.nextRenew = now.Add(min(max(wd.e.timing.RenewEvery(l.ttl)/8, time.Millisecond), 50*time.Millisecond))
		}
		l.mu.Unlock()
		wd.requeue(l)
		return 0, time.Time{}, "", false
	}
	l.mu.Lock()
	ttl, deadline, token = l.ttl, l.deadline, l.value
	early := l.renewErr == nil && l.nextRenew.After(now.Add(wd.e.timing.RenewEvery(l.ttl)/4)) ||
		l.renewErr != nil && l.nextRenew.After(now)
	held := l.state == stateHeld
	if held && !early && mark {
		l.renewing = true
	}
	l.mu.Unlock()
	if !held || early {
		l.opMu.Unlock()
		wd.requeue(l)
		return 0, time.Time{}, "", false
	}
	return ttl, deadline, token, true
}

// renewing is one lease's renewal in a batch.
type renewing struct {
	l     *Lease
	ttl   time.Duration
	next  string // what the key holds once renewed
	i     int    // index of its call, or of its bulk renewal
	bulk  bool   // sent as a bulk renewal
	fence bool   // it pushes the fence counter out
}

// renew renews leases in one pipeline and applies each reply. A lease whose
// renewal failed on a Redis error is retried after a short back-off, never
// later than its deadline; its deadline declares it lost if none succeeds
// in time.
//
// A batch does not yield to other goroutines on purpose: on a machine
// whose cores are busy (a CPU-bound goroutine beside it, at GOMAXPROCS),
// every yield or wake-up waits for a scheduler time slice, so a batch
// goes through with as few as it can, one for its reply; its work is
// bounded (batchSize leases) and the Go scheduler preempts it like any
// other goroutine.
func (wd *watchdog) renew(leases []*Lease) {
	taken := make([]renewing, 0, len(leases))
	var calls []protocol.Call
	renewals := make([]bulkRenewal, 0, len(leases))
	var latest time.Time
	probe.Point(probe.WatchdogBeforeBatch, "")
	// Each renewal counts from a moment taken before its call is built:
	// a protocol may stamp the stored value with the time it builds the
	// call (legacy), and the TTL of the others starts when Redis runs it,
	// later still. One moment for the batch, taken before the first.
	sent := time.Now()
	for _, l := range leases {
		ttl, deadline, token, ok := wd.claim(l, sent, true) // opMu released below, once the reply is applied
		if !ok {
			continue
		}
		latest = later(latest, deadline)
		c, br, next, bulk := l.renewal(ttl, token)
		r := renewing{l: l, ttl: ttl, next: next, bulk: bulk}
		if bulk {
			r.fence = l.leanFence(&br, sent, ttl)
			r.i = len(renewals)
			renewals = append(renewals, br)
		} else {
			r.i = len(calls)
			calls = append(calls, c)
		}
		taken = append(taken, r)
	}
	if len(taken) == 0 {
		return
	}
	// Each reply is judged against its own lease's validity (renewed), so
	// the round trip is bounded by the latest deadline in the batch, not
	// the earliest: one lease close to its deadline cannot fail the rest.
	ctx, cancel := context.WithDeadline(context.Background(), later(latest, time.Now().Add(50*time.Millisecond)))
	defer cancel()
	go func() { // stop waiting for Redis when the Client closes
		select {
		case <-wd.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	callReplies, bulkReplies := wd.e.runCalls(ctx, calls, nil, renewals)
	probe.Point(probe.WatchdogAfterBatch, "")
	if late := time.Since(sent); late > wd.e.timing.RenewEvery(taken[0].ttl)/2 {
		// The replies came (or were read) more than half an interval
		// after the send: a starved process or server, which a backlog of
		// due renewals would not show.
		wd.replyLate(late, len(taken), int64(wd.e.timing.RenewEvery(taken[0].ttl)))
	}
	ls := make([]*Lease, 0, len(taken))
	var refused []int // renewals refused: the lease is lost (or retried)
	var reports []renewReport
	hooked := wd.e.hooksNow().Renew != nil
	if hooked {
		reports = make([]renewReport, 0, len(taken))
	}
	for n, t := range taken {
		l := t.l
		rep := t.reply(callReplies, bulkReplies)
		if rep.err == nil && rep.code != codeOK {
			refused = append(refused, n)
			continue
		}
		ls = append(ls, l)
		if t.fence && rep.err == nil {
			l.fencePushed(sent, t.ttl)
		}
		info, lost, _ := l.renewed(l.Context(), sent, t.ttl, t.next, rep.code, rep.err)
		if lost != nil { // not refused: not lost; but never leave a loss unreported
			wd.report(lost)
		}
		if hooked {
			reports = append(reports, renewReport{l, info})
		}
		wd.backoff(l, t.ttl)
	}
	wd.requeueHeld(ls)
	for _, l := range ls {
		l.opMu.Unlock()
	}
	// The Renew hook runs off the renewal path, on goroutines of its
	// own: a slow hook delays no renewal.
	if len(reports) > 0 {
		wd.reportRenewals(reports)
	}
	if len(refused) == 0 {
		return
	}
	// A refused renewal ends its lease (or is sent again with the value of
	// an unanswered one: see errRetryAlt). Its reply is applied on a
	// goroutine of its own, once the batch's other leases are requeued and
	// free, and its hooks (Lost, then Renew) go to the reporting
	// goroutines once its opMu is free: the hooks may call Unlock. Not
	// applied on a reporting goroutine: while Lost hooks of other locks ran
	// on all of them, the lease stayed "held" and its opMu taken, so an
	// Unlock of it waited for those hooks (from one of them, forever).
	wd.batches.Add(1)
	go func() {
		defer wd.batches.Done()
		for _, n := range refused {
			t := taken[n]
			l, rep := t.l, t.reply(callReplies, bulkReplies)
			info, lost, err := l.renewed(l.Context(), sent, t.ttl, t.next, rep.code, rep.err)
			if err != errRetryAlt {
				wd.refusedDone(l, t.ttl, info, lost)
				continue
			}
			wd.batches.Add(1)
			go func() { // a round trip: the other refusals don't wait for it
				defer wd.batches.Done()
				// The batch's ctx ended with it: bound this one by the
				// lease's deadline, and Close, as renewDirect does.
				rctx, cancel := context.WithDeadline(context.Background(), later(l.Deadline(), time.Now().Add(50*time.Millisecond)))
				go func() {
					select {
					case <-wd.stop:
						cancel()
					case <-rctx.Done():
					}
				}()
				info, lost, _ := l.renewNow(rctx, l.Context(), t.ttl)
				cancel()
				wd.refusedDone(l, t.ttl, info, lost)
			}()
		}
	}()
}

// refusedDone ends a refused renewal of l (see renew) once its reply is
// applied: it requeues l, lets go of its opMu and hands its hooks to the
// reporting goroutines (a loss's Lost and Renew in order; a Renew alone
// with the batches' renewal reports).
func (wd *watchdog) refusedDone(l *Lease, ttl time.Duration, info RenewInfo, lost func()) {
	wd.backoff(l, ttl)
	wd.requeue(l)
	l.opMu.Unlock()
	switch {
	case lost != nil:
		wd.report(func() { l.renewHooks(l.Context(), info, lost) })
	case wd.e.hooksNow().Renew != nil:
		wd.reportRenewals([]renewReport{{l, info}})
	}
}

// reply is t's reply among a batch's replies.
func (t *renewing) reply(calls, bulk []reply) reply {
	if t.bulk {
		return bulk[t.i]
	}
	return calls[t.i]
}

// renewDirect renews leases of a DirectProtocol, each in its own
// goroutine (each may talk to several servers), bounded by its deadline.
func (wd *watchdog) renewDirect(leases []*Lease) {
	var wg sync.WaitGroup
	for _, l := range leases {
		ttl, deadline, _, ok := wd.claim(l, time.Now(), false)
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithDeadline(context.Background(), later(deadline, time.Now().Add(50*time.Millisecond)))
			defer cancel()
			go func() {
				select {
				case <-wd.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			info, lost, _ := l.renewNow(ctx, l.Context(), ttl)
			wd.backoff(l, ttl)
			l.opMu.Unlock()
			wd.requeue(l)
			// Off the renewal path, like a batch's (see renew).
			switch {
			case lost != nil:
				wd.report(func() { l.renewHooks(l.Context(), info, lost) })
			case wd.e.hooksNow().Renew != nil:
				wd.reportRenewals([]renewReport{{l, info}})
			}
		}()
	}
	wg.Wait()
}

// backoff schedules a lease whose renewal failed to retry soon.
func (wd *watchdog) backoff(l *Lease, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.renewErr != nil {
		back := min(max(wd.e.timing.RenewEvery(ttl)/8, 10*time.Millisecond), 500*time.Millisecond)
		l.nextRenew = time.Now().Add(back)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
