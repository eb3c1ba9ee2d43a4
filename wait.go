package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/errs"
	"math/rand/v2"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/protocol"
)

// wait runs attempts of a until one acquires, fails, or ctx ends: the one
// waiting loop every primitive uses. An uncontended acquire costs one
// round trip.
//
// A queued waiter (a.queued: its attempts keep it in the key's FIFO queue,
// and a release hands it the lock by publishing the hand-off ID of its
// token on the Client's own channel) registers for its hand-off before its first
// attempt, which enqueues it if the key is held, then sleeps until the
// hand-off arrives or its retry is due: every third of its queue lease (the
// retry refreshes the lease) or when the holder's TTL runs out, whichever
// is first. Its first attempt is made with first, the ones after it with
// a.retry(). Until the Client has subscribed its hand-off channel it first
// makes one attempt with try, which does not enqueue, so a Client whose
// locks are never contended never opens a pub/sub connection. Any other
// waiter makes its first attempt, subscribes to the key's wake-up channel,
// and sleeps until a release message or its retry.
//
// The retry times of every blocked call are kept by the watchdog's one
// goroutine and timer (engine.Sleeper), which wakes a call on the same
// channel as the notifier: a sleeping call has no timer, no goroutine of
// its own, and waits on that channel and ctx.
func (c *Client) wait(ctx context.Context, a *waitCall, first, try protocol.Protocol) (waited bool, err error) {
	w := &a.Waiter
	if a.queued {
		if try != nil && !c.notify.OwnSubscribed() {
			if ok, _, err := a.attempt(ctx, try); ok || err != nil {
				return false, err
			}
		}
	}
	// Made here, not with a: a call granted by the attempt above never
	// needs one. Nothing can signal w before it is registered below.
	w.Wake = make(chan struct{}, 1)
	if a.queued {
		w.Channel, w.Slot, w.Slots = a.token, keyspace.Slot(a.keys.Lock), waiterSlots(a.base)
		if err = c.notify.Queue(ctx, w); err != nil {
			return false, err // nothing was sent for this token yet
		}
		defer c.notify.Dequeue(w)
	}
	if ctx.Err() != nil {
		// Done before anything was sent for this token: nothing to
		// withdraw.
		return false, errs.CtxDone(ctx)
	}
	// An attempt that fails withdraws what it may have done itself (see
	// Client.obtain).
	ok, ttl, err := a.attempt(ctx, first)
	if err != nil {
		// The first attempt's error ends the call: withdraw whatever it
		// may have left queued or held (a multi-slot waiter keeps the
		// slots it took before the one that failed). Token-checked, so
		// harmless if there is nothing.
		a.withdraw()
	}
	if ok || err != nil {
		return false, err
	}
	waited = true
	c.eng.Stats.Waits.Add(1)
	c.eng.Stats.Waiting.Add(1)
	defer c.eng.Stats.Waiting.Add(-1)
	if !a.queued {
		// dlock's own protocols publish their release messages on
		// sharded pub/sub where the Client uses it; a foreign one PUBLISHes.
		w.Channel, w.Shardable = a.keys.Wake, a.own
		if err = c.notify.Subscribe(ctx, w); err != nil {
			return waited, err
		}
		defer c.notify.Unsubscribe(w)
		if err = c.notify.Refusal(); err != nil {
			return waited, err // this waiter never queues: nothing to withdraw
		}
		// Subscribed now: try again before sleeping, since the holder may
		// have released between the first attempt and the subscription.
		if ok, ttl, err = a.attempt(ctx, a.retry()); ok || err != nil {
			if !ok {
				c.notify.PassOn(w)
			}
			return waited, err
		}
	}
	defer c.eng.Unsleep(&a.Sleeper)
	next := c.retryAfter(ttl, a.queued)
	// early: the next retry comes before the holder's TTL runs out.
	early := c.retryEarly(ttl, a.queued)
	// A Redis error while waiting (a blip, a failover) does not end the
	// wait: the caller asked to wait until ctx ends. The attempts back off
	// from 50ms to RetryInterval; the last error is reported if ctx ends.
	var redisErr error
	backoff := 50 * time.Millisecond
	for {
		c.eng.Sleep(&a.Sleeper, next)
		select {
		case <-w.Wake:
		case <-ctx.Done():
			c.giveUp(a)
			return waited, errs.CtxDoneAfter(ctx, redisErr)
		}
		// No retry wake-up while attempting: the next is armed after it.
		c.eng.Unsleep(&a.Sleeper)
		if c.closed() {
			c.giveUp(a)
			return waited, ErrClosed
		}
		if err = c.notify.Refusal(); err != nil {
			c.giveUp(a)
			return waited, err
		}
		// Only a hand-off message counts, not the wake-up of a dropped or
		// replaced pub/sub connection.
		woken, granted := w.Woken()
		if granted && a.queued {
			c.eng.Stats.Handoffs.Add(1)
			probe.Point(probe.BeforeConfirm, a.keys.Lock)
		}
		if ok, ttl, err = a.attempt(ctx, a.retry()); ok {
			if !woken && early {
				// Acquired on a retry made before the holder's TTL ran
				// out: the release's message should have woken this
				// waiter. Check the subscription now.
				c.notify.Suspect()
			}
			return waited, nil
		}
		next = c.retryAfter(ttl, a.queued)
		early = c.retryEarly(ttl, a.queued)
		switch {
		case err == nil:
			redisErr, backoff = nil, 50*time.Millisecond
		case errors.Is(err, ErrUnavailable) && ctx.Err() == nil:
			redisErr, next, early = err, backoff, false
			backoff = min(2*backoff, c.opts.RetryInterval)
			c.opts.Logger.Debug("dlock: redis error while waiting; retrying", "channel", a.keys.Wake, "err", err)
		case errors.Is(err, ErrContextDone):
			c.giveUp(a)
			return waited, errs.WithRedisCause(err, redisErr)
		default:
			c.giveUp(a)
			return waited, err
		}
	}
}

// giveUp is how a waiter leaves without the lock: a queued one withdraws
// from the queue; a listening one passes an unused wake-up on.
func (c *Client) giveUp(a *waitCall) {
	if a.queued {
		a.withdraw()
	} else {
		c.notify.PassOn(&a.Waiter)
	}
}

// retryEarly reports whether the fallback retry after an attempt that
// found the holder's TTL at holderTTL comes before that TTL runs out: a
// retry that then acquires found the lock released early, and the release
// should have woken the waiter first.
func (c *Client) retryEarly(holderTTL time.Duration, queued bool) bool {
	d := c.opts.RetryInterval
	if queued {
		d = min(d, c.opts.WaiterLease/3)
	}
	return holderTTL > d
}

// retryAfter is the fallback wait of a blocked caller: the holder's
// remaining TTL, at most RetryInterval (and, queued, at most a third of the
// queue lease, which the retry refreshes), plus up to 10% (at most 10ms) of
// jitter so waiters of different clients do not retry in lockstep.
func (c *Client) retryAfter(holderTTL time.Duration, queued bool) time.Duration {
	d := c.opts.RetryInterval
	if queued {
		d = min(d, c.opts.WaiterLease/3)
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

// waiterSlots lists the slots a queued waiter of proto may queue in when
// they are several (a multi-key lock across Cluster slots queues in the
// slot of each group in turn), nil otherwise.
func waiterSlots(proto protocol.Protocol) []int {
	m, ok := proto.(multiSlots)
	if !ok {
		return nil
	}
	slots := make([]int, 0, len(m.groups))
	for _, g := range m.groups {
		slots = append(slots, keyspace.Slot(g.ks[0].Lock))
	}
	return slots
}
