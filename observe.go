package dlock

import (
	"sync/atomic"
	"time"
)

// Hooks are called synchronously from the goroutine that did the work, so
// they must be quick and must not call back into the Client. Any may be nil.
// They are the seam metrics and tracing adapters plug into.
type Hooks struct {
	// Acquire is called when a Lock or TryLock call ends, won or not.
	Acquire func(AcquireInfo)
	// Release is called when Unlock has run its release script (or failed
	// to). It is not called for a lock already reported by Lost.
	Release func(ReleaseInfo)
	// Renew is called after each watchdog or Extend renewal attempt.
	Renew func(RenewInfo)
	// Lost is called once when a held lock is lost, before Done closes.
	Lost func(LostInfo)
	// Behind is called (at most once a second, like the WARN log that
	// comes with it) when the watchdog sends renewals more than half a
	// renewal interval late: the Client holds more locks than it can keep
	// renewed at their TTL on this Redis and CPU, and will lose some if
	// the backlog grows. It runs on its own goroutine.
	Behind func(BehindInfo)
}

// BehindInfo describes a watchdog falling behind.
type BehindInfo struct {
	Held    int           // locks registered with the watchdog
	Waiting int           // renewals sent late in the round that warned (0: every pipeline was busy)
	Lag     time.Duration // how late the latest renewal was sent, or waits
}

// AcquireInfo describes one Lock or TryLock call.
type AcquireInfo struct {
	Key      string
	Fence    uint64        // 0 unless acquired
	Wait     time.Duration // from the call to its return
	Attempts int           // acquire scripts run
	Waited   bool          // the key was held at least once, so the call waited
	Err      error         // nil: acquired
}

// ReleaseInfo describes one Unlock.
type ReleaseInfo struct {
	Key   string
	Fence uint64
	Held  time.Duration // from acquire to release
	Err   error
}

// RenewInfo describes one renewal attempt.
type RenewInfo struct {
	Key   string
	Fence uint64
	Err   error // nil: renewed; otherwise the Redis error, a reply too late to count, or the loss
}

// LostInfo describes a lost lock.
type LostInfo struct {
	Key   string
	Fence uint64
	Held  time.Duration
	Cause error // ErrExpired, ErrTaken or ErrUnreachable (wrapping the last Redis error)
}

// Stats is a snapshot of a Client's counters since New.
type Stats struct {
	Acquired        uint64        // successful Lock/TryLock calls
	NotAcquired     uint64        // TryLock calls that found the key held, and Lock calls that gave up
	Errors          uint64        // acquire calls that failed on a Redis error or bad input
	Waits           uint64        // Lock calls that had to wait
	Handoffs        uint64        // hand-offs received by queued waiters (FIFO)
	Renewals        uint64        // successful renewals (watchdog and Extend)
	RenewalFailures uint64        // renewals that failed on a Redis error
	Lost            uint64        // locks lost while held
	Behind          uint64        // times the watchdog warned it was falling behind (Hooks.Behind)
	Released        uint64        // successful Unlocks
	Held            int64         // locks held now
	Waiting         int64         // Lock calls waiting now
	AcquireTime     time.Duration // total time spent in successful Lock/TryLock calls
}

// counters backs Stats; every field is updated atomically.
type counters struct {
	acquired, notAcquired, errors, waits      atomic.Uint64
	handoffs                                  atomic.Uint64
	renewals, renewalFailures, lost, released atomic.Uint64
	behind                                    atomic.Uint64
	held, waiting, acquireNanos               atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Acquired:        c.acquired.Load(),
		NotAcquired:     c.notAcquired.Load(),
		Errors:          c.errors.Load(),
		Waits:           c.waits.Load(),
		Handoffs:        c.handoffs.Load(),
		Renewals:        c.renewals.Load(),
		RenewalFailures: c.renewalFailures.Load(),
		Lost:            c.lost.Load(),
		Behind:          c.behind.Load(),
		Released:        c.released.Load(),
		Held:            c.held.Load(),
		Waiting:         c.waiting.Load(),
		AcquireTime:     time.Duration(c.acquireNanos.Load()),
	}
}

// ChainHooks returns Hooks that call each of hooks in turn, in the order
// given, skipping nil ones; a field is nil if all of its hooks are. Use it
// to install an adapter's hooks (dlockprom, dlockotel) next to your own.
// Every hook still runs synchronously, so the chain costs the sum of its
// parts.
func ChainHooks(hooks ...Hooks) Hooks {
	var acq []func(AcquireInfo)
	var rel []func(ReleaseInfo)
	var ren []func(RenewInfo)
	var lost []func(LostInfo)
	var behind []func(BehindInfo)
	for _, h := range hooks {
		acq = appendHook(acq, h.Acquire)
		rel = appendHook(rel, h.Release)
		ren = appendHook(ren, h.Renew)
		lost = appendHook(lost, h.Lost)
		behind = appendHook(behind, h.Behind)
	}
	return Hooks{Acquire: chainOf(acq), Release: chainOf(rel), Renew: chainOf(ren), Lost: chainOf(lost),
		Behind: chainOf(behind)}
}

func appendHook[T any](fs []func(T), f func(T)) []func(T) {
	if f == nil {
		return fs
	}
	return append(fs, f)
}

func chainOf[T any](fs []func(T)) func(T) {
	switch len(fs) {
	case 0:
		return nil
	case 1:
		return fs[0]
	}
	return func(v T) {
		for _, f := range fs {
			f(v)
		}
	}
}
