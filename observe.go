package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/engine"
)

// Hooks are called when locks are acquired, released, renewed and lost.
// Any may be nil. They are the seam metrics and tracing adapters plug into
// (package outcome classifies the errors they report). Install them in
// Options.Hooks, or later with [Client.AddHooks].
//
// No lock of the Client is held while a hook runs, so a hook may call back
// into it (Unlock a lock it reports lost, Lock or Unlock others), except
// Close, which waits for hooks. Acquire, Release, Extend's Renew and the
// Lost of a loss found by a call (Unlock, Extend, Err) run on the
// goroutine of that call, before it returns; the watchdog's renewals and
// losses are reported off its renewal path, on up to 64 goroutines. Never
// let a hook block: Close waits for the watchdog's hook calls at most
// Options.ReleaseTimeout, then logs a WARN and returns, leaving them
// running.
//
// Every hook gets a context for its values (a tracing span, a request ID),
// not for its cancellation: the ctx of the call that caused the event
// (Acquire: the acquiring call; Release: Unlock, or Do; Renew: Extend;
// Lost: the Unlock or Extend that found the loss); for the others
// (watchdog renewals, losses the watchdog or the deadline found, releases
// by Close) the lock's context: the acquiring call's ctx without its
// cancellation; for Behind, context.Background().
type Hooks struct {
	// Acquire is called when a Lock or TryLock call ends, won or not.
	Acquire func(context.Context, AcquireInfo)
	// Release is called when an Unlock call ends, unless the lock was
	// released already. Err is nil (released), a Redis error (the lock
	// stays held; Unlock may be retried) or the loss error, which Lost
	// reported first. A lost lock's release is reported once.
	Release func(context.Context, ReleaseInfo)
	// Renew is called after each watchdog or Extend renewal attempt (after
	// Lost, if the renewal found the lock lost). The watchdog's renewals
	// are reported after their batch, in order, on goroutines of their
	// own, so calls may come late and run concurrently, even for one lock;
	// when more than 16,384 wait for a slow hook, the oldest are dropped
	// (Stats.RenewReportsDropped). No Renew call for a lock begins once
	// it has ended (Lost began, or its Unlock or Close returned), but for
	// the one reporting the renewal that found the loss.
	Renew func(context.Context, RenewInfo)
	// Lost is called once when a held lock is lost, after Done has closed.
	// The watchdog's losses are reported in order, off its loop, and never
	// dropped. Unlock does not wait for a loss being reported: it may
	// return the loss, and Release report it, while Lost runs.
	Lost func(context.Context, LostInfo)
	// Behind is called (at most once a second, with a WARN log) when the
	// watchdog sends renewals, or gets their replies, more than half a
	// renewal interval late: the Client holds more locks than it can keep
	// renewed at their TTL, or the process or Redis is starved of CPU, and
	// will lose some if it goes on. It runs on its own goroutine.
	Behind func(context.Context, BehindInfo)
}

// AddHooks installs h next to the hooks the Client has: from then on, each
// event calls the earlier hooks first (Options.Hooks, then earlier AddHooks
// calls, in order), then h's. Nil fields of h add nothing. It is safe to
// call at any time, from a hook too. Options().Hooks stays what was given
// to New.
func (c *Client) AddHooks(h Hooks) {
	c.hooksMu.Lock()
	defer c.hooksMu.Unlock()
	old := c.hooks()
	c.setHooks(&Hooks{
		Acquire: chain(old.Acquire, h.Acquire),
		Release: chain(old.Release, h.Release),
		Renew:   chain(old.Renew, h.Renew),
		Lost:    chain(old.Lost, h.Lost),
		Behind:  chain(old.Behind, h.Behind),
	})
}

// setHooks installs h, and the engine's reports that call them.
func (c *Client) setHooks(h *Hooks) {
	c.hookp.Store(h)
	var e engine.Hooks
	if f := h.Release; f != nil {
		e.Release = func(ctx context.Context, i engine.ReleaseInfo) { f(ctx, ReleaseInfo(i)) }
	}
	if f := h.Renew; f != nil {
		e.Renew = func(ctx context.Context, i engine.RenewInfo) { f(ctx, RenewInfo(i)) }
	}
	if f := h.Lost; f != nil {
		e.Lost = func(ctx context.Context, i engine.LostInfo) { f(ctx, LostInfo(i)) }
	}
	if f := h.Behind; f != nil {
		e.Behind = func(ctx context.Context, i engine.BehindInfo) { f(ctx, BehindInfo(i)) }
	}
	c.eng.SetHooks(e)
}

// noHooks are the hooks of a Client that has none.
var noHooks = &Hooks{}

// hooks returns the hooks installed now. The Hooks it points to never
// change: AddHooks replaces them.
func (c *Client) hooks() *Hooks {
	if h := c.hookp.Load(); h != nil {
		return h
	}
	return noHooks
}

// chain returns a func that calls a, then b; nil ones are skipped.
func chain[T any](a, b func(context.Context, T)) func(context.Context, T) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(ctx context.Context, v T) {
		a(ctx, v)
		b(ctx, v)
	}
}

// BehindInfo describes a watchdog falling behind.
type BehindInfo struct {
	Held    int           // locks registered with the watchdog
	Waiting int           // renewals sent (or answered) late in the round that warned (0: every pipeline was busy)
	Lag     time.Duration // how late the latest renewal was sent, or waits; or how long a batch waited for its replies
}

// AcquireInfo describes one Lock or TryLock call.
type AcquireInfo struct {
	Key      string
	Fence    uint64        // 0 unless acquired
	Wait     time.Duration // from the call to its return
	Attempts int           // acquire scripts run
	Waited   bool          // the key was held at least once, so the call waited
	Try      bool          // a TryLock-like call: one attempt, no waiting
	Err      error         // nil: acquired
}

// ReleaseInfo describes one Unlock.
type ReleaseInfo struct {
	Key   string
	Fence uint64
	Held  time.Duration // from acquire to release
	Took  time.Duration // from the Unlock call to its return
	Err   error         // nil: released; the loss error (matching ErrLost) if the lock was found lost
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
	Acquired            uint64 // successful Lock/TryLock calls
	NotAcquired         uint64 // TryLock calls that found the key held, and Lock calls that gave up
	Errors              uint64 // acquire calls that failed on a Redis error or bad input
	Waits               uint64 // Lock calls that had to wait
	Handoffs            uint64 // hand-offs received by queued waiters (FIFO); not the wake-ups of a pub/sub reconnect
	Renewals            uint64 // successful renewals (watchdog and Extend)
	RenewalFailures     uint64 // renewals that failed on a Redis error
	Lost                uint64 // locks lost while held
	Behind              uint64 // times the watchdog warned it was falling behind (Hooks.Behind)
	RenewReportsDropped uint64 // watchdog renewals the Renew hook missed, too far behind (see Hooks.Renew)
	PubSubRedials       uint64 // pub/sub connections replaced because they missed their liveness probe
	// Refusals counts calls a Redis node refused before running them
	// (TRYAGAIN, ASK, MOVED, CLUSTERDOWN, LOADING, MASTERDOWN), each sent
	// again while its context allowed. Clients over one go-redis client
	// share the count.
	Refusals    uint64
	Released    uint64        // successful Unlocks
	Held        int64         // locks held now
	Waiting     int64         // Lock calls waiting now
	AcquireTime time.Duration // total time spent in successful Lock/TryLock calls
	// ReleasesLeft counts locks whose release no reply confirmed before
	// their deadline (Unlock or Close gave up on Redis), left to expire by
	// their TTL. Those Unlock left count in Released too; those Close
	// left, in Lost.
	ReleasesLeft   uint64
	ReleasesResent uint64 // releases sent again after a new master was reached (Options.ReleaseResendWindow)
}

// snapshot is Stats of the engine's counters c.
func snapshot(c *engine.Counters) Stats {
	return Stats{
		Acquired:            c.Acquired.Load(),
		NotAcquired:         c.NotAcquired.Load(),
		Errors:              c.Errors.Load(),
		Waits:               c.Waits.Load(),
		Handoffs:            c.Handoffs.Load(),
		Renewals:            c.Renewals.Load(),
		RenewalFailures:     c.RenewalFailures.Load(),
		Lost:                c.Lost.Load(),
		Behind:              c.Behind.Load(),
		RenewReportsDropped: c.RenewsDropped.Load(),
		PubSubRedials:       c.PubSubRedials.Load(),
		Released:            c.Released.Load(),
		ReleasesLeft:        c.ReleasesLeft.Load(),
		ReleasesResent:      c.ReleasesResent.Load(),
		Held:                c.Held.Load(),
		Waiting:             c.Waiting.Load(),
		AcquireTime:         time.Duration(c.AcquireNanos.Load()),
	}
}
