// acquire.go owns how a call acquires a key: its attempts (one for
// TryLock; for Lock, as many as its wait needs), the grant that makes a
// lease, and the withdrawal of an attempt that may have taken the key for
// a caller that has gone.

package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/errs"
	"time"

	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

func (c *Client) acquire(ctx context.Context, key string, wait bool, opts []LockOption) (*Lock, error) {
	start := time.Now()
	if ctx == nil {
		return nil, ErrNilContext
	}
	if err := validKey(c.opts.Prefix, key); err != nil {
		return nil, err
	}
	cfg, err := c.lockConfig(opts)
	if err != nil {
		return nil, err
	}
	proto, err := c.primitive(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if c.closed() {
		return nil, ErrClosed
	}
	return c.obtain(ctx, start, c.keysFor(key), proto, cfg, wait)
}

// primitive returns the protocol the call's options chose.
func (c *Client) primitive(ctx context.Context, cfg lockConfig) (protocol.Protocol, error) {
	switch cfg.kinds {
	case kindShared:
		return sharedLock{holdSet{group: SharedValue, suffix: readersSuffix}}, nil
	case kindReentrant:
		owner := cfg.owner
		if owner == "" {
			owner, _ = ownerFromContext(ctx)
		}
		if owner == "" || owner == SharedValue {
			return nil, ErrInvalidOwner
		}
		return reentrantLock{holdSet{group: reentrantValue(owner), suffix: holdsSuffix}}, nil
	case kindSemaphore:
		return semaphore{limit: cfg.limit, permits: cfg.permits}, nil
	}
	return cfg.proto, nil
}

// obtain acquires the lock keys names with base, set up for each
// attempt's mode (see Client.modal): the attempt and wait loop every kind
// of lock shares. Inputs are already validated.
//
// A token is never used again once it was given up. When an attempt ends
// ambiguously (its reply was lost: it may have taken the key, or queued
// us), fails with keys it took still held (a multi-slot attempt, whatever
// the error, even one that ends the call), or its grant came back after
// the validity it bought, the engine withdraws that token in the
// background and the next attempt, if any, uses a fresh one. Reusing it would be unsafe: the withdrawal runs on another
// pooled connection, so the retry can reach Redis first, be granted (the
// key holds our token), and then the withdrawal lands and frees or hands
// off the key under a caller who believes it holds it. Waiting for the
// withdrawal before retrying would not be enough either: the lost attempt
// itself may still be in flight. So the withdrawal leaves a tombstone for
// the token that every acquire script honours (internal/lualib/queue.lua):
// the given-up token cannot be granted or queued by an attempt that lands
// late, and nothing is left held by nobody. A fresh token loses the
// waiter's place in the queue, which only happens after such a fault.
func (c *Client) obtain(ctx context.Context, start time.Time, keys protocol.Keys, base protocol.Protocol, cfg lockConfig, wait bool) (*Lock, error) {
	// A protocol whose waiters queue in Redis: queued waiters unless
	// Barging; TryLock never queues.
	mode := modeTry
	switch {
	case c.opts.Barging:
		mode = modeBarge
	case wait:
		mode = modeJoin
	}
	if err := c.evictionGate(ctx); err != nil {
		c.acquired(ctx, keys.Lock, start, 0, wait, false, 0, err)
		return nil, err
	}
	first, q := c.modal(base, mode)
	a := &waitCall{c: c, keys: keys, ttl: cfg.ttl, renew: cfg.renew, token: engine.NewToken(), base: base,
		mode: mode, wait: wait, queued: q && mode.queued(), own: q, Sleeper: engine.NewSleeper()}
	waited := false
	var err error
	if wait {
		var try protocol.Protocol
		if a.queued && !c.notify.OwnSubscribed() {
			try, _ = c.modal(base, modeTry)
		}
		waited, err = c.wait(ctx, a, first, try)
	} else {
		_, _, err = a.attempt(ctx, first)
	}
	var l *engine.Lease
	if a.l != nil {
		l = &a.l.lease
	}
	if err == nil && c.closed() {
		// Close ran while we were acquiring: don't hand out a lock nobody
		// will renew or release.
		rctx, cancel := context.WithTimeout(engine.ClientRelease(), c.opts.ReleaseTimeout)
		rerr := l.Release(rctx)
		cancel()
		l.LeftByClose(rerr) // if that release failed too
		err = ErrClosed
	}
	var fence uint64
	if err == nil {
		fence = l.Fence()
	}
	c.acquired(ctx, keys.Lock, start, a.attempts, wait, waited, fence, err)
	if err != nil {
		return nil, err
	}
	return &a.l.lock, nil
}

// waitCall is one acquiring call (Client.obtain): what its attempts and,
// if it blocks, its wait use, in one allocation. A blocked call costs
// this, its wake-up channel, its entry in the notifier and its place in
// the watchdog's retry heap: no goroutine of its own besides the
// caller's, no runtime timer, no closures.
type waitCall struct {
	// Sleeper is how the call is woken: by a hand-off or release message
	// (the notifier), by its retry time (the engine's retry clock), or by
	// Close.
	engine.Sleeper
	c     *Client
	keys  protocol.Keys
	ttl   time.Duration
	renew bool
	// token is the call's current token: a new one after a withdrawal.
	token string
	// base is the call's protocol and mode the mode of its first attempt
	// (see first); a protocol set up for a mode is made when it is used,
	// so a sleeping call keeps none.
	base protocol.Protocol
	mode acquireMode
	// wait: Lock (a failed attempt is no error); queued: the attempts keep
	// the caller in the key's FIFO queue (see Client.wait).
	wait, queued bool
	// own: the protocol is one of this package's (its releases publish
	// where this Client's waiters listen: see notify.Waiter.Shardable).
	own      bool
	attempts int
	l        *heldLock // made at the grant, with first
}

// first returns the protocol of the call's first attempt: the lease's,
// and its withdrawal's.
func (a *waitCall) first() protocol.Protocol {
	p, _ := a.c.modal(a.base, a.mode)
	return p
}

// retry returns the protocol of the attempts after the first: the first's,
// except a queued waiter's, which refresh its queue entry.
func (a *waitCall) retry() protocol.Protocol {
	if a.queued {
		p, _ := a.c.modal(a.base, modeQueued)
		return p
	}
	return a.first()
}

// attempt makes one attempt with p, the protocol set up for its mode. It
// reports whether it acquired, and if not, how long the current holder
// still has (<= 0: unknown).
func (a *waitCall) attempt(ctx context.Context, p protocol.Protocol) (bool, time.Duration, error) {
	c, keys := a.c, a.keys
	if err := ctx.Err(); err != nil {
		return false, 0, errs.CtxDone(ctx)
	}
	if err := c.evictionGate(ctx); err != nil {
		return false, 0, err // a failover or CONFIG SET since the last check
	}
	a.attempts++
	sent := time.Now()
	g, err := acquireOnce(ctx, c.rdb, p, keys, a.token, a.ttl)
	if err == nil && g.Acquired {
		probe.Point(probe.AfterGrant, keys.Lock)
	}
	switch {
	case err == nil && g.Acquired && time.Now().After(sent.Add(a.ttl-c.opts.drift(a.ttl))):
		// The grant's reply came back after the validity it bought: the
		// lock may already be someone else's. Give it back, try again.
		a.abandon(p, g.Value)
		if !a.wait {
			return false, 0, errs.Unavailable(errors.New("the acquire reply arrived after the lock's validity"))
		}
		return false, time.Millisecond, nil
	case err == nil && g.Acquired:
		l := new(heldLock)
		l.lock.l = &l.lease
		c.eng.InitLease(&l.lease, a.first(), keys, a.ttl, a.renew, ctx)
		l.lease.Start(sent, g)
		a.l = l
		return true, 0, nil
	case err == nil && !a.wait:
		return false, 0, &NotAcquiredError{Key: keys.Lock, TTL: g.HolderTTL}
	case err == nil:
		return false, g.HolderTTL, nil
	case isKept(err):
		// A multi-slot acquire failed with slots it took still held
		// (not rolled back, or the roll-back failed): whatever the
		// acquire error, even a definite one that ends the call,
		// withdraw them, or they stay held by nobody for the TTL.
		a.abandon(p, g.Value)
		if errors.Is(err, ErrWrongType) || errors.Is(err, ErrInvalidArgument) {
			return false, 0, err
		}
	case errors.Is(err, ErrReplicaAck):
		// The grant was given back by the protocol; if that give-back
		// got no reply, the key may still hold the token: withdraw it
		// again (token-checked, harmless if it is gone).
		a.abandon(p, a.token)
		return false, 0, err
	case errors.Is(err, ErrWrongType), errors.Is(err, ErrInvalidArgument):
		return false, 0, err // the protocol's own verdict, not a Redis failure
	case engine.Ambiguous(err) && g.Value != "":
		a.abandon(p, g.Value)
	case !a.wait && rexec.MayFollowRun(err) && g.Value != "":
		// Refused (or READONLY) on its last try, but go-redis may have
		// sent it before by itself, after a connection error that lost
		// the reply of a try that ran: a try ends here, so withdraw. (A
		// waiting call keeps its token: its next attempt finds a grant
		// its own, and giving up withdraws it.)
		a.abandon(p, g.Value)
	}
	if engine.Ambiguous(err) && ctx.Err() == nil {
		c.evict.stale() // a new master may answer the next attempt
	}
	if cc, ok := c.rdb.(*redis.ClusterClient); ok && engine.Ambiguous(err) {
		cc.ReloadState(ctx) // a failover may have moved the slot: don't wait for the periodic reload
	}
	if ctx.Err() != nil {
		if rexec.IsRefusal(err) {
			return false, 0, errs.RefusedDone(ctx.Err(), err)
		}
		// The context ended during the call: Redis failed, or had not
		// answered yet. Say which, so that the caller can tell a key
		// still held from a silent Redis (not when the caller cancelled).
		switch {
		case errors.Is(ctx.Err(), context.Canceled):
			return false, 0, errs.CtxDone(ctx)
		case errors.Is(err, context.DeadlineExceeded) && time.Since(sent) < noReplyAfter:
			return false, 0, errs.CtxDone(ctx) // sent just before the deadline: the deadline cut it, not Redis
		case errors.Is(err, context.DeadlineExceeded):
			return false, 0, errs.CtxDoneAfter(ctx, errs.NoReply(time.Since(sent), err))
		}
		return false, 0, errs.CtxDoneAfter(ctx, errs.Unavailable(err))
	}
	return false, 0, errs.Unavailable(err)
}

// noReplyAfter is how long a call cut off by its context's deadline must
// have waited for its reply before the error says Redis did not reply
// (ErrNoReply): a call sent a moment before the deadline says nothing about
// Redis.
const noReplyAfter = 250 * time.Millisecond

// isKept reports whether err is a *keptError (apart from attempt, so
// that only a failed attempt pays for the variable errors.As needs).
func isKept(err error) bool {
	var kept *keptError
	return errors.As(err, &kept)
}

// abandon withdraws v (written by p) in the background and makes sure the
// next attempt uses a fresh token.
func (a *waitCall) abandon(p protocol.Protocol, v string) {
	a.withdrawIn(p, v)
	old := a.token
	a.token = engine.NewToken()
	a.c.notify.Retoken(old, a.token)
}

// withdraw withdraws a queued waiter that gives up (and passes on a
// hand-off that reached it too late), for its current token.
func (a *waitCall) withdraw() {
	if a.queued {
		a.withdrawIn(a.first(), a.token)
	}
}

// withdrawIn runs the withdrawal of v, written by p, in the background.
func (a *waitCall) withdrawIn(p protocol.Protocol, v string) {
	c, keys := a.c, a.keys
	c.eng.Background(func(ctx context.Context) error {
		probe.Point(probe.BeforeWithdraw, keys.Lock)
		return c.withdrawRetry(ctx, p, keys, v)
	})
}

// multiAcquirer is implemented by the multi-key protocols, whose grants
// carry a fence per key.
type multiAcquirer interface {
	acquireKeys(ctx context.Context, rdb redis.UniversalClient, token string, ttl time.Duration) (engine.Grant, error)
}

// acquireOnce makes one attempt of p.
func acquireOnce(ctx context.Context, rdb redis.UniversalClient, p protocol.Protocol, k protocol.Keys, token string, ttl time.Duration) (engine.Grant, error) {
	if m, ok := p.(multiAcquirer); ok {
		return m.acquireKeys(ctx, rdb, token, ttl)
	}
	g, err := p.Acquire(ctx, rdb, k, token, ttl)
	return engine.Grant{Grant: g}, err
}

// withdrawRetry withdraws v (see withdraw) until Redis answers or ctx
// ends (the background clean-up's ReleaseTimeout), backing off from 10ms
// to 500ms: a withdrawal that fails (Redis unreachable for a moment, a
// failover) would leave what the abandoned attempt took held by nobody
// for its TTL. Retrying is safe: the withdrawal is token-checked and the
// token is never used again. A closing Client stops retrying (Close
// waits for background work).
func (c *Client) withdrawRetry(ctx context.Context, p protocol.Protocol, keys protocol.Keys, v string) error {
	back := 10 * time.Millisecond
	for {
		err := engine.Withdraw(ctx, c.exec, p, keys, v)
		if err == nil || ctx.Err() != nil {
			return err
		}
		c.opts.Logger.Debug("dlock: withdrawal failed; retrying", "key", keys.Lock, "err", err)
		t := time.NewTimer(back)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		case <-c.closing:
			t.Stop()
			return err
		}
		back = min(2*back, 500*time.Millisecond)
	}
}
