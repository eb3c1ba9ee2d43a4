package dlock

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/protocol"
)

// watchdog is the Client's renewal engine, its registry of held leases,
// and the clock of its blocked calls.
//
// It keeps two min-heaps of leases: one by next renewal time (the leases
// that renew), one by deadline (every held lease: the deadline replaces a
// runtime timer per lock), and one of blocked calls by their next retry
// (which refreshes a queued waiter's queue lease: it replaces a runtime
// timer per waiter). One goroutine sleeps until the earliest of the
// tops, pops only what is due, wakes the calls due first, and hands
// renewals to up to
// renewPipelines batch goroutines, each sending one pipeline of at most
// batchSize renewals on its own pooled connection (go-redis splits it per
// Cluster node). At rest a Client has this one goroutine and one runtime
// timer, whatever the number of locks and waiters.
//
// The heaps are guarded by mu, held only for O(log n) pushes and pops, so
// Lock, Unlock and the watchdog never wait for a scan of the registry. A
// renewal moves its lease's deadline later without touching the deadline
// heap: the lease's item comes up at the old deadline and goes back in at
// the new one (about every second renewal); a deadline moved earlier is
// sifted at once.
// Lock order: a lease's mu may be held while taking wd.mu, never the
// reverse.
type watchdog struct {
	c     *Client
	epoch time.Time     // heap times are nanoseconds since epoch (monotonic)
	wake  chan struct{} // buffered(1): a heap top may have moved earlier
	stop  chan struct{} // closed by Close
	done  chan struct{} // closed when the loop has exited

	mu       sync.Mutex
	renewQ   timeHeap[*lease]    // renewing leases not in a batch, by next renewal
	deadQ    timeHeap[*lease]    // every lease with a live deadline, by deadline
	waitQ    timeHeap[*waitCall] // sleeping blocked calls, by next retry
	waitEnd  bool                // Close: blocked calls are woken, not put to sleep
	held     int                 // registered leases
	inflight int                 // batch goroutines running
	batches  sync.WaitGroup      // renewal batches and the goroutines applying their replies: Close waits for them
	hooks    sync.WaitGroup      // the goroutines reporting to hooks: Close waits for them, at most ReleaseTimeout (see Client.waitAside)
	lastWarn int64               // when the last "falling behind" warning was given
	// The reports waiting for a goroutine to run them (see report):
	// losses, taken by up to reporters goroutines (lossRunning), and
	// renewals in chunks (renewsQueued of them), taken by up to
	// renewReporters others (renewRunning).
	repMu        sync.Mutex
	losses       []func()
	renews       [][]renewReport
	renewsQueued int
	lossRunning  int
	renewRunning int
	// wakeAt is when the loop looks at the heaps again by itself (its
	// timer; math.MaxInt64: never, math.MinInt64: it is about to). An
	// entry due after it needs no kick, so a lock taken while the loop
	// sleeps until an earlier lock's renewal wakes nobody. lead is the
	// shortest time from an add to the lease's first renewal or deadline
	// since the loop last looked (-1: no add): while locks come and go,
	// the loop wakes once per lead rather than once per lock.
	wakeAt, lead int64
	wakes        atomic.Int64 // times the loop woke (tests)
}

const (
	// batchSize caps one renewal (or release) pipeline: 16 bulk calls
	// (bulkMax locks each), so 100,000 locks renewed every interval take
	// about 100 round trips.
	batchSize = 1024
	// popsPerHold caps the leases take pops from a heap per hold of wd.mu:
	// Lock and Unlock get it in between.
	popsPerHold = 512
	// behindBatch caps one renewal pipeline while renewals run late: fewer,
	// larger round trips, each of which needs a scheduler wake-up (on a
	// machine whose cores are all busy, a time slice) to be read.
	behindBatch = 2 * batchSize
	// renewPipelines is how many pipelines the watchdog (and Close) keep
	// in flight at once, each on its own pooled connection.
	renewPipelines = 8
)

// wdEntry is a lease's place in the watchdog; guarded by watchdog.mu.
type wdEntry struct {
	rAt, dAt int64 // next renewal, deadline (ns since epoch)
	every    int64 // renewal interval (ns)
	ri, di   int32 // slot in renewQ / deadQ, -1 if not there
	failing  bool  // backing off after a failed renewal: never early
	reg      bool  // registered: renewed (if it renews)
}

func newWatchdog(c *Client) *watchdog {
	wd := &watchdog{
		c: c, epoch: time.Now(), wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}),
		renewQ: timeHeap[*lease]{ref: func(l *lease) *int32 { return &l.wd.ri }},
		deadQ:  timeHeap[*lease]{ref: func(l *lease) *int32 { return &l.wd.di }},
		waitQ:  timeHeap[*waitCall]{ref: func(a *waitCall) *int32 { return &a.ti }},
		wakeAt: math.MinInt64, lead: -1,
	}
	go wd.loop()
	return wd
}

func (wd *watchdog) at(t time.Time) int64 { return int64(t.Sub(wd.epoch)) }

func (wd *watchdog) now() int64 { return int64(time.Since(wd.epoch)) }

// slack is how early a renewal may go along with others: a quarter of its
// interval, none while it backs off after an error.
func (e *wdEntry) slack() int64 {
	if e.failing {
		return 0
	}
	return e.every / 4
}

// add registers a lease that has just started: its deadline is watched,
// and it is renewed if it renews.
func (wd *watchdog) add(l *lease) {
	l.mu.Lock()
	rAt, dAt, every := wd.at(l.nextRenew), wd.at(l.deadline), int64(wd.c.opts.renewEvery(l.ttl))
	wd.mu.Lock()
	e := &l.wd
	e.reg, e.ri, e.di = true, -1, -1
	wd.held++
	e.dAt = dAt
	wd.deadQ.push(dAt, l)
	first := dAt
	if l.renew {
		e.rAt, e.every = rAt, every
		wd.renewQ.push(rAt, l)
		first = min(first, rAt)
	}
	top := first < wd.wakeAt
	if lead := max(first-wd.now(), 0); wd.lead < 0 || lead < wd.lead {
		wd.lead = lead
	}
	wd.mu.Unlock()
	l.mu.Unlock()
	if top {
		wd.kick()
	}
}

// kick wakes the loop to look at the heaps now.
func (wd *watchdog) kick() {
	select {
	case wd.wake <- struct{}{}:
	default:
	}
}

// remove unregisters a lease: no more renewals. Its deadline stays
// watched until the lease ends (leaseTimer.Stop), and Close releases it
// if it is still held then (an Unlock that failed).
func (wd *watchdog) remove(l *lease) {
	wd.mu.Lock()
	e := &l.wd
	if e.reg {
		e.reg = false
		wd.held--
	}
	if e.ri >= 0 {
		wd.renewQ.remove(e.ri)
	}
	wd.mu.Unlock()
}

// renewEarlier moves the lease's next renewal, if it is queued, to at
// when that is earlier (an Extend to a shorter TTL), with the renewal
// interval every. A lease in a batch is requeued at its nextRenew after
// the reply. Callers may hold the lease's mu.
func (wd *watchdog) renewEarlier(l *lease, at time.Time, every time.Duration) {
	wd.mu.Lock()
	e := &l.wd
	top := false
	if e.ri >= 0 {
		e.every = int64(every)
		if t := wd.at(at); t < e.rAt {
			e.rAt = t
			top = wd.renewQ.fix(e.ri, t)
		}
	}
	wd.mu.Unlock()
	if top {
		wd.kick()
	}
}

// leaseTimer is a lease's deadline "timer": an entry in the watchdog's
// deadline heap. Reset and Stop may be called with the lease's mu held.
type leaseTimer struct{ l *lease }

// Reset arms the deadline d from now.
func (t leaseTimer) Reset(d time.Duration) bool {
	wd := t.l.c.wd
	wd.mu.Lock()
	e := &t.l.wd
	e.dAt = wd.now() + int64(d)
	top := false
	if e.di >= 0 {
		top = wd.deadQ.fix(e.di, e.dAt)
	} else {
		top = wd.deadQ.push(e.dAt, t.l)
	}
	wd.mu.Unlock()
	if top {
		wd.kick()
	}
	return true
}

// Stop disarms the deadline (the lease ended).
func (t leaseTimer) Stop() bool {
	wd := t.l.c.wd
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if e := &t.l.wd; e.di >= 0 {
		wd.deadQ.remove(e.di)
		return true
	}
	return false
}

// sleep puts a blocked call to sleep until its retry, d from now, unless
// something wakes it first (see Client.wait); a call asleep already is
// moved. After Close it is woken at once instead.
func (wd *watchdog) sleep(a *waitCall, d time.Duration) {
	wd.mu.Lock()
	if wd.waitEnd {
		wd.mu.Unlock()
		a.Signal()
		return
	}
	at := wd.now() + int64(d)
	var top bool
	if a.ti >= 0 {
		top = wd.waitQ.fix(a.ti, at)
	} else {
		top = wd.waitQ.push(at, a)
	}
	wd.mu.Unlock()
	if top {
		wd.kick()
	}
}

// unsleep cancels a blocked call's retry, if it is still asleep.
func (wd *watchdog) unsleep(a *waitCall) {
	wd.mu.Lock()
	if a.ti >= 0 {
		wd.waitQ.remove(a.ti)
	}
	wd.mu.Unlock()
}

// wakeAllWaits wakes every sleeping blocked call, and any that goes to
// sleep from now on, for Close: they see the Client closed and return.
func (wd *watchdog) wakeAllWaits() {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	wd.waitEnd = true
	for wd.waitQ.len() > 0 {
		wd.waitQ.pop().Signal()
	}
}

// live returns every lease with a deadline still watched (for Close,
// once the loop and the batches have stopped): the registered ones, and
// those an Unlock unregistered whose release failed (Redis unreachable),
// which stay held until their deadline, now that no loop ends them there.
func (wd *watchdog) live() []*lease {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	out := make([]*lease, 0, wd.deadQ.len())
	for _, it := range wd.deadQ.ls {
		out = append(out, wd.deadQ.xs[it.id])
	}
	return out
}

func (wd *watchdog) loop() {
	defer close(wd.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		expired, due, next := wd.take()
		if len(expired) > 0 {
			wd.expire(expired)
		}
		if len(due) > 0 {
			wd.dispatch(due)
		}
		if len(expired) > 0 || len(due) > 0 {
			continue
		}
		wait := time.Hour
		if next >= 0 {
			wait = time.Duration(max(next-wd.now(), 0))
		}
		timer.Reset(wait)
		select {
		case <-wd.stop:
			return
		case <-wd.wake:
		case <-timer.C:
		}
		wd.wakes.Add(1)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// expire looks at leases past their deadline, on a goroutine of its own:
// each is lost (Done closes there, at once) or re-armed at a deadline a
// renewal moved. The loop does not wait for them, and a loss's Lost hook
// runs on the reporting goroutines (report): a slow hook holds up no other
// lock's renewal, deadline or Done, nor a blocked call's retry (a queued
// waiter's lease refresh).
func (wd *watchdog) expire(ls []*lease) {
	wd.batches.Add(1)
	go func() {
		defer wd.batches.Done()
		if h := beforeExpire.Load(); h != nil {
			(*h)() // tests: deadlines that fire late (a paused process)
		}
		for _, l := range ls {
			if lost := l.onDeadline(); lost != nil {
				wd.reportLost(lost)
			}
		}
	}()
}

// beforeExpire, if set (by tests only), runs before expire looks at the
// leases past their deadline.
var beforeExpire atomic.Pointer[func()]

const (
	// reporters caps the goroutines that report the watchdog's losses
	// (and run their Lost hooks) at once: a slow hook delays no other
	// lock's report while fewer than this many run, and a Client losing
	// 100,000 locks to an outage does not start a goroutine for each.
	reporters = 64
	// renewReporters caps the goroutines that run the Renew hook for the
	// watchdog's renewals, apart from those reporting losses: a Renew
	// hook that cannot keep up (or blocks) holds up no loss's report.
	renewReporters = 64
	// renewChunk is how many renewal reports one reporting goroutine
	// takes at once: a batch's reports spread over several goroutines.
	renewChunk = 64
	// maxQueuedRenews caps the renewal reports waiting for a reporting
	// goroutine (a Renew hook slower than the renewals): beyond it the
	// oldest are dropped (Stats.RenewReportsDropped).
	maxQueuedRenews = 16384
)

// renewReport is a watchdog renewal of l waiting for the Renew hook (whose
// context is l's).
type renewReport struct {
	l    *lease
	info RenewInfo
}

// report runs f, a loss report, on one of up to reporters goroutines that
// take the losses in order; Close waits for them (see Client.waitAside). A loss
// report is never dropped, nor does it wait for a Renew hook (see
// reportRenewals).
func (wd *watchdog) report(f func()) {
	wd.repMu.Lock()
	defer wd.repMu.Unlock()
	wd.losses = append(wd.losses, f)
	if wd.lossRunning < reporters {
		wd.lossRunning++
		wd.hooks.Add(1)
		go wd.lossLoop()
	}
}

// reportLost runs lost, the report of a loss (see lease.lose), on the
// reporting goroutines if there is a Lost hook, here if not.
func (wd *watchdog) reportLost(lost func()) {
	if wd.c.hooks().Lost != nil {
		wd.report(lost)
	} else {
		lost()
	}
}

// hookCalls returns how many goroutines are reporting to hooks, and how
// many reports wait for them (Close's WARN: see Client.waitAside).
func (wd *watchdog) hookCalls() (running, queued int) {
	wd.repMu.Lock()
	defer wd.repMu.Unlock()
	return wd.lossRunning + wd.renewRunning, len(wd.losses) + wd.renewsQueued
}

func (wd *watchdog) lossLoop() {
	defer wd.hooks.Done()
	for {
		wd.repMu.Lock()
		if len(wd.losses) == 0 {
			wd.losses = nil
			wd.lossRunning--
			wd.repMu.Unlock()
			return
		}
		f := wd.losses[0]
		wd.losses[0] = nil
		wd.losses = wd.losses[1:]
		wd.repMu.Unlock()
		f()
	}
}

// reportRenewals hands a batch's renewal reports to up to renewReporters
// goroutines of their own (Close waits for them: see Client.waitAside), without waiting for any
// hook: when more than maxQueuedRenews wait, the oldest are dropped and
// counted.
func (wd *watchdog) reportRenewals(rs []renewReport) {
	wd.repMu.Lock()
	defer wd.repMu.Unlock()
	for len(rs) > 0 {
		n := min(len(rs), renewChunk)
		wd.renews = append(wd.renews, rs[:n:n])
		wd.renewsQueued += n
		rs = rs[n:]
		if wd.renewRunning < renewReporters {
			wd.renewRunning++
			wd.hooks.Add(1)
			go wd.renewLoop()
		}
	}
	for wd.renewsQueued > maxQueuedRenews {
		old := wd.renews[0]
		wd.renews[0] = nil
		wd.renews = wd.renews[1:]
		wd.renewsQueued -= len(old)
		wd.c.stats.renewsDropped.Add(uint64(len(old)))
	}
}

func (wd *watchdog) renewLoop() {
	defer wd.hooks.Done()
	for {
		wd.repMu.Lock()
		if len(wd.renews) == 0 {
			wd.renews = nil
			wd.renewRunning--
			wd.repMu.Unlock()
			return
		}
		rs := wd.renews[0]
		wd.renews[0] = nil
		wd.renews = wd.renews[1:]
		wd.renewsQueued -= len(rs)
		wd.repMu.Unlock()
		if h := wd.c.hooks().Renew; h != nil {
			for _, r := range rs {
				// A report taken once its lock has ended (lost, or
				// released) is dropped: Lost has begun, or Unlock may
				// have returned, and the renewal says nothing any more.
				if r.l.held() {
					h(r.l.ctx, r.info)
				}
			}
		}
	}
}

// take wakes the blocked calls whose retry is due, and pops the leases
// past their deadline and the renewals due now (and, to fill the last
// pipeline, those within their slack), as many as free batch slots can
// take. next is when to look again (-1: nothing scheduled).
func (wd *watchdog) take() (expired, due []*lease, next int64) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	now := wd.now()
	// Retries first: nothing else the loop does delays a queued waiter's
	// lease refresh. A wake-up is a send on a buffered channel; at most a
	// batch of them per call (Lock and Unlock get wd.mu in between, and
	// the loop comes back at once for the rest).
	for n := 0; n < popsPerHold && wd.waitQ.len() > 0 && wd.waitQ.topAt() <= now; n++ {
		wd.waitQ.pop().Signal()
	}
	for wd.deadQ.len() > 0 && wd.deadQ.topAt() <= now {
		if e := &wd.deadQ.top().wd; e.dAt > now {
			// A renewal moved the deadline: the item goes back in at it.
			wd.deadQ.fixTop(e.dAt)
			continue
		}
		expired = append(expired, wd.deadQ.pop())
	}
	// One batch per call: the loop comes back for the next at once, and
	// Lock and Unlock get wd.mu in between (popping thousands of leases
	// at once held it for milliseconds).
	free := min(renewPipelines-wd.inflight, 1)
	budget := free * batchSize
	var lag int64
	if wd.renewQ.len() > 0 && free <= 0 {
		lag = now - wd.renewQ.top().wd.rAt // due, and no pipeline free
	}
	if wd.renewQ.len() > 0 && free > 0 {
		if e := &wd.renewQ.top().wd; now-e.rAt > e.every/4 {
			budget = free * behindBatch // running late: larger batches
		}
	}
	// The heap's times, not the leases' (each lease read is a cache miss).
	for budget > 0 && wd.renewQ.len() > 0 && wd.renewQ.topAt() <= now {
		lag = max(lag, now-wd.renewQ.topAt())
		due = append(due, wd.renewQ.pop())
		budget--
		if len(due)%popsPerHold == 0 {
			// Lock and Unlock (waiting over a millisecond, the mutex
			// hands itself over) get wd.mu between every popsPerHold
			// pops.
			wd.mu.Unlock()
			wd.mu.Lock()
		}
	}
	for budget > 0 && len(due)%batchSize != 0 && wd.renewQ.len() > 0 &&
		wd.renewQ.top().wd.rAt <= now+wd.renewQ.top().wd.slack() {
		due = append(due, wd.renewQ.pop())
		budget--
	}
	if len(due) > 0 {
		wd.inflight++ // dispatch gives it back if due is all direct, or adds one
	}
	next = -1
	if wd.deadQ.len() > 0 {
		next = wd.deadQ.topAt()
	}
	if wd.renewQ.len() > 0 && wd.inflight < renewPipelines {
		if at := wd.renewQ.top().wd.rAt; next < 0 || at < next {
			next = at
		}
	}
	if wd.waitQ.len() > 0 {
		if at := wd.waitQ.topAt(); next < 0 || at < next {
			next = at
		}
	}
	if lag > 0 {
		wd.behindLocked(now, lag, due)
	}
	if wd.lead >= 0 && (next < 0 || now+wd.lead < next) {
		// Locks were taken since the last look (and may be released
		// already): wake when one taken now would be due, so the next
		// ones need no kick.
		next = now + wd.lead
	}
	wd.lead = -1
	switch {
	case len(expired) > 0 || len(due) > 0:
		wd.wakeAt = math.MinInt64 // the loop takes again at once
	case next < 0:
		wd.wakeAt = math.MaxInt64
	default:
		wd.wakeAt = next
	}
	return expired, due, next
}

// behindLocked warns (at most once a second) when a renewal waits for a
// free pipeline, or is sent, more than half an interval after it was due:
// the watchdog is falling behind, and locks would be lost if it went on.
func (wd *watchdog) behindLocked(now, lag int64, due []*lease) {
	var limit int64
	if len(due) > 0 {
		limit = due[0].wd.every / 2
	} else {
		limit = wd.renewQ.top().wd.every / 2
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
	wd.c.stats.behind.Add(1)
	go func() { // not under wd.mu: the hook and the logger may be slow
		wd.c.opts.Logger.Warn("dlock: renewals are falling behind: locks may be lost; hold fewer locks per Client, raise their TTL or give Redis and this process more CPU",
			"held", info.Held, "waiting", info.Waiting, "late", info.Lag)
		if h := wd.c.hooks().Behind; h != nil {
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
func (wd *watchdog) dispatch(due []*lease) {
	var direct []*lease
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

func (wd *watchdog) start(leases []*lease, run func([]*lease)) {
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
func (wd *watchdog) requeue(l *lease) {
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
func (wd *watchdog) requeueHeld(ls []*lease) {
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

func (wd *watchdog) queueState(l *lease) queueState {
	return queueState{held: l.state == stateHeld, failing: l.renewErr != nil,
		rAt: wd.at(l.nextRenew), every: int64(wd.c.opts.renewEvery(l.ttl)), dAt: wd.at(l.deadline)}
}

// requeueLocked applies st to l's heap entries and reports whether l
// became the top of the renewal heap. Callers hold wd.mu.
func (wd *watchdog) requeueLocked(l *lease, st queueState) bool {
	e := &l.wd
	if e.di >= 0 && st.dAt > e.dAt {
		// A renewal moved the deadline later: its heap item stays where it
		// is, and take puts it back at this deadline when it comes up.
		e.dAt = st.dAt
	}
	if st.held && e.reg && e.ri < 0 {
		e.rAt, e.every, e.failing = st.rAt, st.every, st.failing
		return wd.renewQ.push(e.rAt, l)
	}
	return false
}

// claim takes a due lease's op mutex for a batch. A lease busy with an
// Extend or an Unlock is not waited for (the rest of the batch would wait
// with it): it is looked at again shortly. A lease whose renewal an Extend
// moved later goes back to wait for it. mark: the caller sends the
// renewal itself, in flight from now until renewed applies its reply.
func (wd *watchdog) claim(l *lease, now time.Time, mark bool) (ttl time.Duration, deadline time.Time, token string, ok bool) {
	if !l.opMu.TryLock() {
		l.mu.Lock()
		if !l.nextRenew.After(now) {
			l.nextRenew = now.Add(min(max(wd.c.opts.renewEvery(l.ttl)/8, time.Millisecond), 50*time.Millisecond))
		}
		l.mu.Unlock()
		wd.requeue(l)
		return 0, time.Time{}, "", false
	}
	l.mu.Lock()
	ttl, deadline, token = l.ttl, l.deadline, l.value
	early := l.renewErr == nil && l.nextRenew.After(now.Add(wd.c.opts.renewEvery(l.ttl)/4)) ||
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
	l     *lease
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
func (wd *watchdog) renew(leases []*lease) {
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
	callReplies, bulkReplies := wd.c.runCalls(ctx, calls, renewals)
	probe.Point(probe.WatchdogAfterBatch, "")
	if late := time.Since(sent); late > wd.c.opts.renewEvery(taken[0].ttl)/2 {
		// The replies came (or were read) more than half an interval
		// after the send: a starved process or server, which a backlog of
		// due renewals would not show.
		wd.replyLate(late, len(taken), int64(wd.c.opts.renewEvery(taken[0].ttl)))
	}
	ls := make([]*lease, 0, len(taken))
	var refused []int // renewals refused: the lease is lost (or retried)
	var reports []renewReport
	hooked := wd.c.hooks().Renew != nil
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
		info, lost, _ := l.renewed(l.ctx, sent, t.ttl, t.next, rep.code, rep.err)
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
			info, lost, err := l.renewed(l.ctx, sent, t.ttl, t.next, rep.code, rep.err)
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
				info, lost, _ := l.renewNow(rctx, l.ctx, t.ttl)
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
func (wd *watchdog) refusedDone(l *lease, ttl time.Duration, info RenewInfo, lost func()) {
	wd.backoff(l, ttl)
	wd.requeue(l)
	l.opMu.Unlock()
	switch {
	case lost != nil:
		wd.report(func() { l.renewHooks(l.ctx, info, lost) })
	case wd.c.hooks().Renew != nil:
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
func (wd *watchdog) renewDirect(leases []*lease) {
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
			info, lost, _ := l.renewNow(ctx, l.ctx, ttl)
			wd.backoff(l, ttl)
			l.opMu.Unlock()
			wd.requeue(l)
			// Off the renewal path, like a batch's (see renew).
			switch {
			case lost != nil:
				wd.report(func() { l.renewHooks(l.ctx, info, lost) })
			case wd.c.hooks().Renew != nil:
				wd.reportRenewals([]renewReport{{l, info}})
			}
		}()
	}
	wg.Wait()
}

// backoff schedules a lease whose renewal failed to retry soon.
func (wd *watchdog) backoff(l *lease, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.renewErr != nil {
		back := min(max(wd.c.opts.renewEvery(ttl)/8, 10*time.Millisecond), 500*time.Millisecond)
		l.nextRenew = time.Now().Add(back)
	}
}

// releaseAll releases leases for Close: in pipelines of batchSize, up to
// renewPipelines at once, all within ctx. It returns, at the latest soon
// after ctx ends, how many it did not release (they stay in Redis until
// their TTL runs out, unless a release still in flight lands) and the
// first few errors.
func (wd *watchdog) releaseAll(ctx context.Context, leases []*lease) (left int, errs []error) {
	var mu sync.Mutex
	var done int // leases whose release concluded (released, or not held)
	note := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil || errors.Is(err, ErrNotHeld) {
			done++
		} else if len(errs) < 3 {
			errs = append(errs, err)
		}
	}
	var batched, direct []*lease
	for _, l := range leases {
		if l.direct() {
			direct = append(direct, l)
		} else {
			batched = append(batched, l)
		}
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		sem := make(chan struct{}, renewPipelines)
		var wg sync.WaitGroup
		for len(batched) > 0 {
			n := min(len(batched), batchSize)
			part := batched[:n]
			batched = batched[n:]
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				calls := make([]protocol.Call, len(part))
				values := make([]string, len(part))
				for i, l := range part {
					l.endForRelease() // Done closes before the key can pass on
					values[i] = l.token()
					calls[i] = l.releaseCall(values[i])
				}
				replies, _ := wd.c.runCalls(ctx, calls, nil)
				for i, l := range part {
					note(l.release(withReleaseReply(ctx, values[i], replies[i].code, replies[i].err)))
				}
			}()
		}
		for _, l := range direct {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				note(l.release(ctx))
			}()
		}
		wg.Wait()
	}()
	select {
	case <-finished:
	case <-ctx.Done():
		// A go-redis client without ContextTimeoutEnabled may wait for its
		// ReadTimeout past ctx: don't wait for it.
		select {
		case <-finished:
		case <-time.After(50 * time.Millisecond):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return len(leases) - done, errs
}

// releaseReply is the reply to a release already sent in a pipeline for
// value, handed to lease.release through its context so the release logic
// stays in one place. It is used once, and only for that value.
type releaseReply struct {
	mu    sync.Mutex
	value string
	code  int64
	err   error
	used  bool
}

type releaseReplyKey struct{}

func withReleaseReply(ctx context.Context, value string, code int64, err error) context.Context {
	return context.WithValue(ctx, releaseReplyKey{}, &releaseReply{value: value, code: code, err: err})
}

// sentRelease returns the pipelined reply of a release of value carried
// by ctx, if any and not used yet.
func sentRelease(ctx context.Context, value string) (code int64, err error, ok bool) {
	r, _ := ctx.Value(releaseReplyKey{}).(*releaseReply)
	if r == nil {
		return 0, nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.used || r.value != value {
		return 0, nil, false
	}
	r.used = true
	return r.code, r.err, true
}

// closeError reports the locks Close left to expire.
func closeError(left, total int, errs []error) error {
	if left == 0 {
		return nil
	}
	if len(errs) == 0 {
		errs = []error{unavailable(context.DeadlineExceeded)}
	}
	return &CloseError{Left: left, Total: total, Err: errors.Join(errs...)}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// timeHeap is a min-heap by time (ns since the watchdog's epoch) of
// leases (the renewal and deadline heaps) or blocked calls (the retry
// heap) that moves or removes an item in O(log n) without a search. Each
// item in the heap holds a slot id, kept in the item itself (ref returns
// where; -1: not in the heap), and the heap keeps each slot's index in a
// table of its own: sifting moves entries of two dense arrays and never
// touches the items, each of which (a lease: hundreds of bytes, among
// 100,000) would cost a cache miss at every level. Each entry carries its
// time (a deadline item's may be earlier than its lease's deadline: see
// take). It is 4-ary: half the levels of a binary heap, and a node's
// children share a cache line. Guarded by watchdog.mu.
type timeHeap[T any] struct {
	ls   []heapItem     // the heap
	pos  []int32        // pos[id]: slot id's index in ls
	xs   []T            // xs[id]: slot id's item
	free []int32        // slot ids not in use
	ref  func(T) *int32 // the item's slot id
}

type heapItem struct {
	at int64
	id int32
}

// heapArity is the number of children of a node.
const heapArity = 4

func (h *timeHeap[T]) len() int     { return len(h.ls) }
func (h *timeHeap[T]) top() T       { return h.xs[h.ls[0].id] }
func (h *timeHeap[T]) topAt() int64 { return h.ls[0].at }

// push adds x at time at and reports whether it became the top.
func (h *timeHeap[T]) push(at int64, x T) bool {
	var id int32
	if n := len(h.free); n > 0 {
		id = h.free[n-1]
		h.free = h.free[:n-1]
		h.xs[id] = x
	} else {
		id = int32(len(h.xs))
		h.xs = append(h.xs, x)
		h.pos = append(h.pos, 0)
	}
	*h.ref(x) = id
	h.ls = append(h.ls, heapItem{at, id})
	return h.up(len(h.ls)-1) == 0
}

func (h *timeHeap[T]) pop() T {
	return h.removeAt(0)
}

// remove takes out the item in slot id.
func (h *timeHeap[T]) remove(id int32) T {
	return h.removeAt(int(h.pos[id]))
}

// fix moves the item in slot id to time at and reports whether it is
// the top.
func (h *timeHeap[T]) fix(id int32, at int64) bool {
	i := int(h.pos[id])
	h.ls[i].at = at
	h.sift(i)
	return h.pos[id] == 0
}

// fixTop moves the top item to time at.
func (h *timeHeap[T]) fixTop(at int64) {
	h.ls[0].at = at
	h.down(0)
}

// removeAt takes out the item at index i.
func (h *timeHeap[T]) removeAt(i int) T {
	n := len(h.ls) - 1
	id := h.ls[i].id
	x := h.xs[id]
	if i != n {
		h.ls[i] = h.ls[n]
		h.pos[h.ls[i].id] = int32(i)
	}
	h.ls = h.ls[:n]
	if i < n {
		h.sift(i)
	}
	var zero T
	h.xs[id] = zero
	h.free = append(h.free, id)
	*h.ref(x) = -1
	// Give memory back after a mass release.
	if c := cap(h.ls); c > 1024 && len(h.ls) < c/4 {
		h.compact()
	}
	return x
}

// compact reallocates the heap and its slot tables at its size, the
// slots renumbered in heap order.
func (h *timeHeap[T]) compact() {
	n := len(h.ls)
	ls, pos, xs := make([]heapItem, n), make([]int32, n), make([]T, n)
	for i, it := range h.ls {
		x := h.xs[it.id]
		ls[i], pos[i], xs[i] = heapItem{it.at, int32(i)}, int32(i), x
		*h.ref(x) = int32(i)
	}
	h.ls, h.pos, h.xs, h.free = ls, pos, xs, nil
}

func (h *timeHeap[T]) sift(i int) {
	if h.up(i) == i {
		h.down(i)
	}
}

// up moves the item at i towards the top while it is earlier than its
// parent, and returns where it ends.
func (h *timeHeap[T]) up(i int) int {
	it := h.ls[i]
	for i > 0 {
		p := (i - 1) / heapArity
		if h.ls[p].at <= it.at {
			break
		}
		h.ls[i] = h.ls[p]
		h.pos[h.ls[i].id] = int32(i)
		i = p
	}
	h.ls[i] = it
	h.pos[it.id] = int32(i)
	return i
}

// down moves the item at i away from the top while a child is earlier.
func (h *timeHeap[T]) down(i int) {
	n := len(h.ls)
	it := h.ls[i]
	for {
		c := heapArity*i + 1
		if c >= n {
			break
		}
		m := c
		for k := c + 1; k < min(c+heapArity, n); k++ {
			if h.ls[k].at < h.ls[m].at {
				m = k
			}
		}
		if it.at <= h.ls[m].at {
			break
		}
		h.ls[i] = h.ls[m]
		h.pos[h.ls[i].id] = int32(i)
		i = m
	}
	h.ls[i] = it
	h.pos[it.id] = int32(i)
}
