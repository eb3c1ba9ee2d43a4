// wait.go owns how a blocked call waits: its registration with the
// notifier, its sleeps between attempts, the retry times, and giving up.

package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/probe"
)

// wait runs attempts of a until one acquires, fails, or ctx ends: the one
// waiting loop every protocol uses. An uncontended acquire costs one
// round trip.
//
// A queued waiter (a.queued: its attempts keep it in the key's FIFO queue,
// and a release hands it the lock by publishing the hand-off ID of its
// token on the Client's own channel) registers for its hand-off before its
// first attempt, which enqueues it if the key is held, then sleeps until
// the hand-off arrives or its retry is due: every third of its queue lease
// (the retry refreshes the lease) or when the holder's TTL runs out,
// whichever is first. Until the Client has subscribed its hand-off channel
// it first makes one attempt in ModeTry, which does not enqueue, so a
// Client whose locks are never contended never opens a pub/sub connection.
// Any other waiter makes its first attempt, subscribes to the key's
// wake-up channel, and sleeps until a release message or its retry.
//
// The retry times of every blocked call are kept by the watchdog's one
// goroutine and timer (Sleeper), which wakes a call on the same channel as
// the notifier: a sleeping call has no timer, no goroutine of its own, and
// waits on that channel and ctx.
func (e *Engine) wait(ctx context.Context, a *waitCall) error {
	w := &a.Waiter
	if a.queued && !e.notify.OwnSubscribed() {
		if ok, _, err := a.attempt(ctx, ModeTry); ok || err != nil {
			return err
		}
	}
	// Made here, not with a: a call granted by the attempt above never
	// needs one. Nothing can signal w before it is registered below.
	w.Wake = make(chan struct{}, 1)
	if a.queued {
		w.Channel, w.Slot, w.Slots = a.token, keyspace.Slot(a.r.Keys.Lock), waiterSlots(a.r.Proto)
		if err := e.notify.Queue(ctx, w); err != nil {
			return err // nothing was sent for this token yet
		}
		defer e.notify.Dequeue(w)
	}
	if ctx.Err() != nil {
		// Done before anything was sent for this token: nothing to
		// withdraw.
		return errs.CtxDone(ctx)
	}
	// An attempt that fails withdraws what it may have done itself (see
	// Engine.Acquire).
	ok, ttl, err := a.attempt(ctx, a.mode)
	if err != nil {
		// The first attempt's error ends the call: withdraw whatever it
		// may have left queued or held (a multi-slot waiter keeps the
		// slots it took before the one that failed). Token-checked, so
		// harmless if there is nothing.
		a.withdraw()
	}
	if ok || err != nil {
		return err
	}
	a.res.Waited = true
	e.Stats.Waits.Add(1)
	e.Stats.Waiting.Add(1)
	defer e.Stats.Waiting.Add(-1)
	if !a.queued {
		// dlock's own protocols publish their release messages on
		// sharded pub/sub where the Client uses it; a foreign one PUBLISHes.
		w.Channel, w.Shardable = a.r.Keys.Wake, a.r.Proto.Queued()
		if err = e.notify.Subscribe(ctx, w); err != nil {
			return err
		}
		defer e.notify.Unsubscribe(w)
		if err = e.notify.Refusal(); err != nil {
			return err // this waiter never queues: nothing to withdraw
		}
		// Subscribed now: try again before sleeping, since the holder may
		// have released between the first attempt and the subscription.
		if ok, ttl, err = a.attempt(ctx, a.retryMode()); ok || err != nil {
			if !ok {
				e.notify.PassOn(w)
			}
			return err
		}
	}
	defer e.Unsleep(&a.Sleeper)
	return e.sleepLoop(ctx, a, ttl)
}

// sleepLoop is the wait's loop: sleep until woken or the retry is due,
// then attempt; ttl is the holder's TTL the last attempt found.
func (e *Engine) sleepLoop(ctx context.Context, a *waitCall, ttl time.Duration) error {
	w := &a.Waiter
	next := e.retryAfter(ttl, a.queued)
	// early: the next retry comes before the holder's TTL runs out.
	early := e.retryEarly(ttl, a.queued)
	// A Redis error while waiting (a blip, a failover) does not end the
	// wait: the caller asked to wait until ctx ends. The attempts back off
	// from 50ms to RetryInterval; the last error is reported if ctx ends.
	var redisErr error
	backoff := 50 * time.Millisecond
	for {
		e.Sleep(&a.Sleeper, next)
		select {
		case <-w.Wake:
		case <-ctx.Done():
			e.giveUp(a)
			return errs.CtxDoneAfter(ctx, redisErr)
		}
		// No retry wake-up while attempting: the next is armed after it.
		e.Unsleep(&a.Sleeper)
		if e.Closed() {
			e.giveUp(a)
			return errs.ErrClosed
		}
		if err := e.notify.Refusal(); err != nil {
			e.giveUp(a)
			return err
		}
		// Only a hand-off message counts, not the wake-up of a dropped or
		// replaced pub/sub connection.
		woken, granted := w.Woken()
		if granted && a.queued {
			e.Stats.Handoffs.Add(1)
			probe.Point(probe.BeforeConfirm, a.r.Keys.Lock)
		}
		ok, ttl, err := a.attempt(ctx, a.retryMode())
		if ok {
			if !woken && early {
				// Acquired on a retry made before the holder's TTL ran
				// out: the release's message should have woken this
				// waiter. Check the subscription now.
				e.notify.Suspect()
			}
			return nil
		}
		next = e.retryAfter(ttl, a.queued)
		early = e.retryEarly(ttl, a.queued)
		switch {
		case err == nil:
			redisErr, backoff = nil, 50*time.Millisecond
		case errors.Is(err, errs.ErrUnavailable) && ctx.Err() == nil:
			redisErr, next, early = err, backoff, false
			backoff = min(2*backoff, e.retryInterval)
			e.log.Debug("dlock: redis error while waiting; retrying", "channel", a.r.Keys.Wake, "err", err)
		case errors.Is(err, errs.ErrContextDone):
			e.giveUp(a)
			return errs.WithRedisCause(err, redisErr)
		default:
			e.giveUp(a)
			return err
		}
	}
}

// giveUp is how a waiter leaves without the lock: a queued one withdraws
// from the queue; a listening one passes an unused wake-up on.
func (e *Engine) giveUp(a *waitCall) {
	if a.queued {
		a.withdraw()
	} else {
		e.notify.PassOn(&a.Waiter)
	}
}

// retryEarly reports whether the fallback retry after an attempt that
// found the holder's TTL at holderTTL comes before that TTL runs out: a
// retry that then acquires found the lock released early, and the release
// should have woken the waiter first.
func (e *Engine) retryEarly(holderTTL time.Duration, queued bool) bool {
	d := e.retryInterval
	if queued {
		d = min(d, e.queue.Lease/3)
	}
	return holderTTL > d
}

// retryAfter is the fallback wait of a blocked caller: the holder's
// remaining TTL, at most RetryInterval (and, queued, at most a third of the
// queue lease, which the retry refreshes), plus up to 10% (at most 10ms) of
// jitter so waiters of different clients do not retry in lockstep.
func (e *Engine) retryAfter(holderTTL time.Duration, queued bool) time.Duration {
	d := e.retryInterval
	if queued {
		d = min(d, e.queue.Lease/3)
	}
	if holderTTL > 0 && holderTTL < d {
		d = holderTTL
	}
	j := min(d/10, 10*time.Millisecond)
	if j > 0 {
		d += rand.N(j)
	}
	return max(d, time.Millisecond)
}

// waiterSlots lists the slots a queued waiter of p may queue in when they
// are several (see Slotted), nil otherwise.
func waiterSlots(p Protocol) []int {
	if s, ok := p.(Slotted); ok {
		return s.WaiterSlots()
	}
	return nil
}
