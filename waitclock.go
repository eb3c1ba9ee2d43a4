// waitclock.go owns the blocked calls' retry clock: a blocked call
// sleeps in the watchdog's retry heap until its next retry, and Close
// wakes them all.

package dlock

import "time"

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
		top = wd.waitQ.Fix(a.ti, at)
	} else {
		top = wd.waitQ.Push(at, a)
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
		wd.waitQ.Remove(a.ti)
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
