// watchdog.go owns the watchdog: its type, its heaps of leases (by next
// renewal, by deadline), a lease's registration (add, remove, the deadline
// "timer") and the loop that takes what is due and expires leases past
// their deadline. Renewal is in renew.go, the hook reports in report.go,
// the blocked calls' retry clock in waitclock.go, Close's release of
// every lease in closeall.go.

package engine

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/timeheap"
)

// watchdog is the engine's renewal loop, its registry of held leases,
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
	e     *Engine
	epoch time.Time     // heap times are nanoseconds since epoch (monotonic)
	wake  chan struct{} // buffered(1): a heap top may have moved earlier
	stop  chan struct{} // closed by Close
	done  chan struct{} // closed when the loop has exited

	mu       sync.Mutex
	renewQ   timeheap.Heap[*Lease]   // renewing leases not in a batch, by next renewal
	deadQ    timeheap.Heap[*Lease]   // every lease with a live deadline, by deadline
	waitQ    timeheap.Heap[*Sleeper] // sleeping blocked calls, by next retry
	waitEnd  bool                    // Close: blocked calls are woken, not put to sleep
	held     int                     // registered leases
	inflight int                     // batch goroutines running
	batches  sync.WaitGroup          // renewal batches and the goroutines applying their replies: Close waits for them
	hooks    sync.WaitGroup          // the goroutines reporting to hooks: Close waits for them, at most ReleaseTimeout (see Engine.waitAside)
	lastWarn int64                   // when the last "falling behind" warning was given
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

func newWatchdog(e *Engine) *watchdog {
	wd := &watchdog{
		e: e, epoch: time.Now(), wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}),
		renewQ: timeheap.New(func(l *Lease) *int32 { return &l.wd.ri }),
		deadQ:  timeheap.New(func(l *Lease) *int32 { return &l.wd.di }),
		waitQ:  timeheap.New(func(s *Sleeper) *int32 { return &s.slot }),
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
func (wd *watchdog) add(l *Lease) {
	l.mu.Lock()
	rAt, dAt, every := wd.at(l.nextRenew), wd.at(l.deadline), int64(wd.e.timing.RenewEvery(l.ttl))
	wd.mu.Lock()
	e := &l.wd
	e.reg, e.ri, e.di = true, -1, -1
	wd.held++
	e.dAt = dAt
	wd.deadQ.Push(dAt, l)
	first := dAt
	if l.renew {
		e.rAt, e.every = rAt, every
		wd.renewQ.Push(rAt, l)
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
func (wd *watchdog) remove(l *Lease) {
	wd.mu.Lock()
	e := &l.wd
	if e.reg {
		e.reg = false
		wd.held--
	}
	if e.ri >= 0 {
		wd.renewQ.Remove(e.ri)
	}
	wd.mu.Unlock()
}

// renewEarlier moves the lease's next renewal, if it is queued, to at
// when that is earlier (an Extend to a shorter TTL), with the renewal
// interval every. A lease in a batch is requeued at its nextRenew after
// the reply. Callers may hold the lease's mu.
func (wd *watchdog) renewEarlier(l *Lease, at time.Time, every time.Duration) {
	wd.mu.Lock()
	e := &l.wd
	top := false
	if e.ri >= 0 {
		e.every = int64(every)
		if t := wd.at(at); t < e.rAt {
			e.rAt = t
			top = wd.renewQ.Fix(e.ri, t)
		}
	}
	wd.mu.Unlock()
	if top {
		wd.kick()
	}
}

// leaseTimer is a lease's deadline "timer": an entry in the watchdog's
// deadline heap. Reset and Stop may be called with the lease's mu held.
type leaseTimer struct{ l *Lease }

// Reset arms the deadline d from now.
func (t leaseTimer) Reset(d time.Duration) bool {
	wd := t.l.e.wd
	wd.mu.Lock()
	e := &t.l.wd
	e.dAt = wd.now() + int64(d)
	top := false
	if e.di >= 0 {
		top = wd.deadQ.Fix(e.di, e.dAt)
	} else {
		top = wd.deadQ.Push(e.dAt, t.l)
	}
	wd.mu.Unlock()
	if top {
		wd.kick()
	}
	return true
}

// Stop disarms the deadline (the lease ended).
func (t leaseTimer) Stop() bool {
	wd := t.l.e.wd
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if e := &t.l.wd; e.di >= 0 {
		wd.deadQ.Remove(e.di)
		return true
	}
	return false
}

// live returns every lease with a deadline still watched (for Close,
// once the loop and the batches have stopped): the registered ones, and
// those an Unlock unregistered whose release failed (Redis unreachable),
// which stay held until their deadline, now that no loop ends them there.
func (wd *watchdog) live() []*Lease {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	out := make([]*Lease, 0, wd.deadQ.Len())
	for l := range wd.deadQ.All() {
		out = append(out, l)
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
func (wd *watchdog) expire(ls []*Lease) {
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

// take wakes the blocked calls whose retry is due, and pops the leases
// past their deadline and the renewals due now (and, to fill the last
// pipeline, those within their slack), as many as free batch slots can
// take. next is when to look again (-1: nothing scheduled).
func (wd *watchdog) take() (expired, due []*Lease, next int64) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	now := wd.now()
	// Retries first: nothing else the loop does delays a queued waiter's
	// lease refresh. A wake-up is a send on a buffered channel; at most a
	// batch of them per call (Lock and Unlock get wd.mu in between, and
	// the loop comes back at once for the rest).
	for n := 0; n < popsPerHold && wd.waitQ.Len() > 0 && wd.waitQ.TopAt() <= now; n++ {
		wd.waitQ.Pop().Signal()
	}
	for wd.deadQ.Len() > 0 && wd.deadQ.TopAt() <= now {
		if e := &wd.deadQ.Top().wd; e.dAt > now {
			// A renewal moved the deadline: the item goes back in at it.
			wd.deadQ.FixTop(e.dAt)
			continue
		}
		expired = append(expired, wd.deadQ.Pop())
	}
	// One batch per call: the loop comes back for the next at once, and
	// Lock and Unlock get wd.mu in between (popping thousands of leases
	// at once held it for milliseconds).
	free := min(renewPipelines-wd.inflight, 1)
	budget := free * batchSize
	var lag int64
	if wd.renewQ.Len() > 0 && free <= 0 {
		lag = now - wd.renewQ.Top().wd.rAt // due, and no pipeline free
	}
	if wd.renewQ.Len() > 0 && free > 0 {
		if e := &wd.renewQ.Top().wd; now-e.rAt > e.every/4 {
			budget = free * behindBatch // running late: larger batches
		}
	}
	// The heap's times, not the leases' (each lease read is a cache miss).
	for budget > 0 && wd.renewQ.Len() > 0 && wd.renewQ.TopAt() <= now {
		lag = max(lag, now-wd.renewQ.TopAt())
		due = append(due, wd.renewQ.Pop())
		budget--
		if len(due)%popsPerHold == 0 {
			// Lock and Unlock (waiting over a millisecond, the mutex
			// hands itself over) get wd.mu between every popsPerHold
			// pops.
			wd.mu.Unlock()
			wd.mu.Lock()
		}
	}
	for budget > 0 && len(due)%batchSize != 0 && wd.renewQ.Len() > 0 &&
		wd.renewQ.Top().wd.rAt <= now+wd.renewQ.Top().wd.slack() {
		due = append(due, wd.renewQ.Pop())
		budget--
	}
	if len(due) > 0 {
		wd.inflight++ // dispatch gives it back if due is all direct, or adds one
	}
	next = -1
	if wd.deadQ.Len() > 0 {
		next = wd.deadQ.TopAt()
	}
	if wd.renewQ.Len() > 0 && wd.inflight < renewPipelines {
		if at := wd.renewQ.Top().wd.rAt; next < 0 || at < next {
			next = at
		}
	}
	if wd.waitQ.Len() > 0 {
		if at := wd.waitQ.TopAt(); next < 0 || at < next {
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
