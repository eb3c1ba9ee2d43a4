package dlock

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/probe"
)

// watchdog is the one goroutine per Client that renews every held lease.
// It wakes when the earliest renewal is due and renews, in one pipeline per
// batch (go-redis splits it per Cluster node), every lease due within a
// quarter of its interval, so leases acquired at different moments share
// round trips: 10,000 leases cost a few dozen round trips per interval.
//
// It also keeps the registry of every held lease, renewed or not, which
// Close releases.
type watchdog struct {
	c    *Client
	wake chan struct{} // buffered(1): the earliest due time may have changed
	stop chan struct{} // closed by Close
	done chan struct{} // closed when the goroutine has exited

	mu     sync.Mutex          // guards leases and wakeAt
	leases map[*lease]struct{} // every held lease of the Client
	// wakeAt is when the sleeping loop will wake next (zero: not asleep or
	// no renewal scheduled). add wakes it only for an earlier renewal.
	wakeAt time.Time
}

// batchSize caps one renewal pipeline.
const batchSize = 1000

func newWatchdog(c *Client) *watchdog {
	wd := &watchdog{
		c: c, wake: make(chan struct{}, 1), stop: make(chan struct{}),
		done: make(chan struct{}), leases: make(map[*lease]struct{}),
	}
	go wd.loop()
	return wd
}

func (wd *watchdog) add(l *lease) {
	l.mu.Lock()
	at := l.nextRenew
	l.mu.Unlock()
	wd.mu.Lock()
	wd.leases[l] = struct{}{}
	wake := l.renew && (wd.wakeAt.IsZero() || at.Before(wd.wakeAt))
	if wake {
		wd.wakeAt = at
	}
	wd.mu.Unlock()
	if wake {
		select {
		case wd.wake <- struct{}{}:
		default:
		}
	}
}

// kick wakes the watchdog to look for due leases now.
func (wd *watchdog) kick() {
	select {
	case wd.wake <- struct{}{}:
	default:
	}
}

func (wd *watchdog) remove(l *lease) {
	wd.mu.Lock()
	delete(wd.leases, l)
	wd.mu.Unlock()
}

// held returns every lease still registered.
func (wd *watchdog) held() []*lease {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	out := make([]*lease, 0, len(wd.leases))
	for l := range wd.leases {
		out = append(out, l)
	}
	return out
}

func (wd *watchdog) loop() {
	defer close(wd.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, next := wd.due(time.Now())
		if len(due) > 0 {
			var direct []*lease
			batch := due[:0:0]
			for _, l := range due {
				if l.direct() {
					direct = append(direct, l)
				} else {
					batch = append(batch, l)
				}
			}
			wd.renewDirect(direct)
			for len(batch) > 0 {
				n := min(len(batch), batchSize)
				wd.renew(batch[:n])
				batch = batch[n:]
			}
			continue // renewals moved the schedule: look again
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		wd.mu.Lock()
		wd.wakeAt = time.Now().Add(wait)
		wd.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-wd.stop:
			return
		case <-wd.wake:
		case <-timer.C:
		}
		// Awake: until the next sleep, every add signals (and the signal
		// waits in the buffer), since this scan may miss the new lease.
		wd.mu.Lock()
		wd.wakeAt = time.Time{}
		wd.mu.Unlock()
	}
}

// due returns the renewing leases due by now and, if there are any, those
// due within a quarter of their interval (unless backing off after an
// error); and the earliest renewal time of the leases not due yet.
func (wd *watchdog) due(now time.Time) (due []*lease, next time.Time) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	// Only when some lease is actually due do the others within their slack
	// come along: otherwise each round trip would pick up the few leases
	// that slid into the window meanwhile, and batches would shrink to
	// nothing.
	anyDue := false
	var early []*lease
	for l := range wd.leases {
		if !l.renew {
			continue
		}
		l.mu.Lock()
		at, ttl, failing := l.nextRenew, l.ttl, l.renewErr != nil
		l.mu.Unlock()
		// Leases that renew fine may go early to share the round trip; a
		// lease backing off after an error waits for its own time.
		slack := wd.c.opts.renewEvery(ttl) / 4
		if failing {
			slack = 0
		}
		switch {
		case !at.After(now):
			anyDue = true
			due = append(due, l)
		case !at.After(now.Add(slack)):
			early = append(early, l)
			fallthrough
		default:
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
	}
	if anyDue {
		due = append(due, early...)
	}
	return due, next
}

// renew renews leases in one pipeline and applies each reply. A lease whose
// renewal failed on a Redis error is retried after a short back-off, never
// later than its deadline; its deadline timer declares it lost if none
// succeeds in time.
func (wd *watchdog) renew(leases []*lease) {
	calls := make([]Call, 0, len(leases))
	nexts := make([]string, 0, len(leases))
	ttls := make([]time.Duration, 0, len(leases))
	sents := make([]time.Time, 0, len(leases))
	taken := leases[:0:0]
	earliest := time.Time{}
	probe.Point(probe.WatchdogBeforeBatch, "")
	for _, l := range leases {
		// A lease busy with an Extend or an Unlock is not waited for: the
		// rest of the batch would wait with it. It is looked at again soon.
		if !l.opMu.TryLock() { // released below, once the reply is applied
			wd.busy(l)
			continue
		}
		l.mu.Lock()
		ttl := l.ttl
		if earliest.IsZero() || l.deadline.Before(earliest) {
			earliest = l.deadline
		}
		l.mu.Unlock()
		// Each renewal counts from a moment taken before its call is
		// built: a protocol may stamp the stored value with the time it
		// builds the call (legacy), and the TTL of the others starts when
		// Redis runs it, later still.
		sents = append(sents, time.Now())
		c, next := l.renewCall(ttl)
		calls, nexts, ttls, taken = append(calls, c), append(nexts, next), append(ttls, ttl), append(taken, l)
	}
	if len(taken) == 0 {
		return
	}
	// A renewal that cannot land before the earliest deadline in the batch
	// is useless to that lease; bound the round trip by it (at least 50ms).
	ctx, cancel := context.WithDeadline(context.Background(),
		later(earliest, time.Now().Add(50*time.Millisecond)))
	defer cancel()
	go func() { // stop waiting for Redis when the Client closes
		select {
		case <-wd.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	cmds := runBatch(ctx, wd.c.rdb, calls)
	probe.Point(probe.WatchdogAfterBatch, "")
	for i, l := range taken {
		code, err := cmds[i].Int64()
		if l.renewed(sents[i], ttls[i], nexts[i], code, err) == errRetryAlt {
			_ = l.renewNow(ctx, ttls[i])
		}
		wd.backoff(l, ttls[i])
		l.opMu.Unlock()
	}
}

// busy reschedules a lease the watchdog found in the middle of an Extend
// or an Unlock: whatever that call concludes moves or ends its schedule;
// until then it is looked at again after a short pause.
func (wd *watchdog) busy(l *lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); !l.nextRenew.After(now) {
		l.nextRenew = now.Add(min(max(wd.c.opts.renewEvery(l.ttl)/8, time.Millisecond), 50*time.Millisecond))
	}
}

// renewDirect renews leases of a DirectProtocol, each in its own
// goroutine (each may talk to several servers), bounded by its deadline.
func (wd *watchdog) renewDirect(leases []*lease) {
	var wg sync.WaitGroup
	for _, l := range leases {
		if !l.opMu.TryLock() { // busy with an Extend or an Unlock
			wd.busy(l)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer l.opMu.Unlock()
			l.mu.Lock()
			ttl, deadline := l.ttl, l.deadline
			l.mu.Unlock()
			ctx, cancel := context.WithDeadline(context.Background(), later(deadline, time.Now().Add(50*time.Millisecond)))
			defer cancel()
			go func() {
				select {
				case <-wd.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			_ = l.renewNow(ctx, ttl)
			wd.backoff(l, ttl)
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

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
