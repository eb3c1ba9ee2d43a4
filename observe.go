package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/engine"
)

// Hooks are called when locks are acquired, released, renewed and lost.
// Any may be nil. They are the seam metrics and tracing adapters plug into.
// Install them in Options.Hooks, or later with [Client.AddHooks].
//
// No lock of the Client is held while a hook runs, so a hook may call back
// into it: Unlock a lock it reports lost (which returns the loss), Lock or
// Unlock others. Close is the exception: it waits for the watchdog's
// reporting goroutines and runs Release hooks itself, so a hook must not
// call it. Acquire, Release, Extend's Renew and the Lost of a loss an
// Unlock, an Extend or an Err found (Err, Leadership's Err and Proclaim
// find one when called past the deadline before the watchdog has) run on
// the goroutine of that call, before it returns, and delay it; the
// watchdog's renewals and the losses it finds are reported off
// its renewal path, each on up to 64 goroutines of their own. Keep hooks
// quick all the same, and never let one block: Close waits for the
// watchdog's Lost and Renew hook calls at most Options.ReleaseTimeout,
// then logs a WARN and returns; a hook still running then keeps running
// after Close has returned, until it returns, and so do the reports
// queued behind it.
//
// Every hook gets a context first, for the values it carries (a tracing
// span, a request ID), not for its cancellation:
//
//   - Acquire: the ctx given to the acquiring call (Lock, TryLock, Do,
//     LockMulti and every other call that takes a lock);
//   - Release: the ctx given to Unlock (Do: its ctx, without its
//     cancellation); for a lock released by Close, the lock's context;
//   - Renew: the ctx given to Extend; for a watchdog renewal, the lock's
//     context;
//   - Lost: the ctx of the Unlock or Extend call that found the lock lost;
//     when the watchdog or the lock's deadline found it, the lock's context;
//   - Behind: context.Background(): no call causes it.
//
// A lock's context is the ctx of the call that acquired it, without its
// cancellation (context.WithoutCancel): it keeps that ctx's values, and so
// its values stay reachable while the lock is held.
type Hooks struct {
	// Acquire is called when a Lock or TryLock call ends, won or not.
	Acquire func(context.Context, AcquireInfo)
	// Release is called when an Unlock call ends, unless the lock was
	// released already (or lost while this release was in flight, which
	// Lost reports). Err is nil (released), a Redis error (the lock
	// stays held; Unlock may be retried) or the loss error: a loss the
	// call found is reported by Lost first. A lost lock's release is
	// reported once: Unlock called again returns the loss without it.
	Release func(context.Context, ReleaseInfo)
	// Renew is called after each watchdog or Extend renewal attempt
	// (after Lost, if the renewal found the lock lost). Extend calls it
	// before it returns. The watchdog's renewals are reported after their
	// batch is done, on up to 64 goroutines that take them in order (not
	// those that report losses: a Renew hook that falls behind or blocks
	// delays no Lost nor Done): a slow hook delays no renewal, but its
	// calls may come late and run concurrently, even for one lock. A
	// hook slower than the renewals falls behind; when more than 16,384
	// reports wait for it, the oldest are dropped and counted in
	// Stats.RenewReportsDropped.
	//
	// Per lock, no Renew call begins once the lock has ended: after its
	// Lost call began, or after the Unlock (or Close) that released it
	// returned. The one exception is the call reporting the renewal that
	// found the loss, made right after Lost, with the loss as Err. Each
	// report is checked against the lock as its call begins; one that
	// comes later is dropped, uncounted (it no longer says anything about
	// the lock). A call already running when the lock ends may still be
	// running after Lost began or Unlock returned. Extend's Renew call is
	// made only if the lock is still held then, too.
	Renew func(context.Context, RenewInfo)
	// Lost is called once when a held lock is lost, after Done has closed:
	// Done closes as soon as the loss is known, so work bound to it (Do's
	// context, an elected leader's) stops whatever a hook does.
	// A loss the watchdog finds (a refused renewal, a deadline passed) is
	// reported off the watchdog's loop, on up to 64 goroutines that take
	// the losses in order (never one per lock), so a slow hook delays no
	// lock's renewal nor a blocked call's retry, and other locks' losses
	// only while it runs on all 64. A loss is never dropped. Unlock does
	// not wait for a loss being reported (the hook may call it): it may
	// return the loss, and Release report it, while Lost runs.
	Lost func(context.Context, LostInfo)
	// Behind is called (at most once a second, like the WARN log that
	// comes with it) when the watchdog sends renewals more than half a
	// renewal interval late, or gets their replies that late: the Client
	// holds more locks than it can keep renewed at their TTL on this Redis
	// and CPU (or the process or Redis is starved of CPU), and will lose
	// some if it goes on. It runs on its own goroutine.
	Behind func(context.Context, BehindInfo)
}

// AddHooks installs h next to the hooks the Client has: from then on, each
// event calls the earlier hooks first (Options.Hooks, then earlier AddHooks
// calls, in order), then h's. Nil fields of h add nothing. It is safe to
// call while other goroutines use the Client, and from a hook: a call in
// flight sees either the hooks before or the hooks after (a watchdog
// report, the hooks installed when it runs). No lock is held while a hook
// runs (see Hooks). Options().Hooks stays what was given to New.
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
	Acquired        uint64 // successful Lock/TryLock calls
	NotAcquired     uint64 // TryLock calls that found the key held, and Lock calls that gave up
	Errors          uint64 // acquire calls that failed on a Redis error or bad input
	Waits           uint64 // Lock calls that had to wait
	Handoffs        uint64 // hand-offs received by queued waiters (FIFO); not the wake-ups of a pub/sub reconnect
	Renewals        uint64 // successful renewals (watchdog and Extend)
	RenewalFailures uint64 // renewals that failed on a Redis error
	Lost            uint64 // locks lost while held
	Behind          uint64 // times the watchdog warned it was falling behind (Hooks.Behind)
	// RenewReportsDropped counts watchdog renewals the Renew hook was not
	// called for: it fell so far behind that the reports waiting for it
	// passed 16,384 (see Hooks.Renew).
	RenewReportsDropped uint64
	PubSubRedials       uint64 // pub/sub connections replaced because they missed their liveness probe
	// Refusals counts the script calls and commands a Redis node refused
	// before running them, during a Cluster topology change (TRYAGAIN,
	// ASK, MOVED, CLUSTERDOWN, LOADING, MASTERDOWN): each was sent again,
	// with a jittered back-off, while the caller's context allowed (a
	// renewal: while its lease's deadline allowed). The count is the Redis
	// client's: Clients over the same go-redis client share it.
	Refusals    uint64
	Released    uint64        // successful Unlocks
	Held        int64         // locks held now
	Waiting     int64         // Lock calls waiting now
	AcquireTime time.Duration // total time spent in successful Lock/TryLock calls
	// ReleasesLeft counts locks whose release no reply confirmed before
	// their deadline: Unlock (after its retries, see
	// Options.ReleaseTimeout) or Close gave up on an unreachable Redis, and
	// the key was left to expire by its TTL, unless a release whose reply
	// was lost had run. Those Unlock left count in Released too, as the
	// caller let go; those Close left, in Lost.
	ReleasesLeft uint64
	// ReleasesResent counts releases sent again after the Client reached
	// a new master (see Options.ReleaseResendWindow): those the old master
	// may have lost.
	ReleasesResent uint64
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
