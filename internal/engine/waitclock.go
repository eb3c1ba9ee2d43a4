// waitclock.go owns the blocked calls' retry clock: a blocked call
// sleeps in the watchdog's retry heap until its next retry, and Close
// wakes them all.

package engine

import (
	"time"

	"github.com/dlock-go/dlock/internal/notify"
)

// Sleeper is a blocked call's place in the retry clock: the notifier's
// Waiter that wakes it, and its slot in the watchdog's retry heap.
type Sleeper struct {
	notify.Waiter
	slot int32 // -1: not in the heap
}

// NewSleeper returns a Sleeper not in the heap.
func NewSleeper() Sleeper { return Sleeper{slot: -1} }

// Sleep puts a blocked call to sleep until its retry, d from now, unless
// something wakes it first; a call asleep already is moved. After Close
// it is woken at once instead.
func (e *Engine) Sleep(s *Sleeper, d time.Duration) { e.wd.sleep(s, d) }

// Unsleep cancels a blocked call's retry, if it is still asleep.
func (e *Engine) Unsleep(s *Sleeper) { e.wd.unsleep(s) }

// sleep puts a blocked call to sleep until its retry, d from now, unless
// something wakes it first (the wait loop, wait.go); a call asleep already is
// moved. After Close it is woken at once instead.
func (wd *watchdog) sleep(a *Sleeper, d time.Duration) {
	wd.mu.Lock()
	if wd.waitEnd {
		wd.mu.Unlock()
		a.Signal()
		return
	}
	at := wd.now() + int64(d)
	var top bool
	if a.slot >= 0 {
		top = wd.waitQ.Fix(a.slot, at)
	} else {
		top = wd.waitQ.Push(at, a)
	}
	wd.mu.Unlock()
	if top {
		wd.kick()
	}
}

// unsleep cancels a blocked call's retry, if it is still asleep.
func (wd *watchdog) unsleep(a *Sleeper) {
	wd.mu.Lock()
	if a.slot >= 0 {
		wd.waitQ.Remove(a.slot)
	}
	wd.mu.Unlock()
}

// wakeAllWaits wakes every sleeping blocked call, and any that goes to
// sleep from now on, for Close: they see the Client closed and return.
func (wd *watchdog) wakeAllWaits() {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	wd.waitEnd = true
	for wd.waitQ.Len() > 0 {
		wd.waitQ.Pop().Signal()
	}
}
