package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Lock is a held lock: exclusive, or (by what took it) a read lock
// (RWLock), a reentrant owner's handle (Reentrant), semaphore permits
// (Semaphore), or several keys (LockMulti). Its methods are safe for
// concurrent use by multiple goroutines, and on a nil *Lock (or a zero
// Lock), which is a lock not held: Err, Extend and Unlock return
// ErrNotHeld, Done is closed, and the rest return zero values.
type Lock struct {
	l *lease
}

// closed is the Done channel of a nil Lock.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// held reports whether k is a real handle (not nil, not a zero Lock).
func (k *Lock) held() bool { return k != nil && k.l != nil }

// Lock acquires key, waiting until it is free or ctx ends. A free key is
// taken in one round trip. A blocked call is woken by the holder's release
// (pub/sub), and retries on its own after min(holder's TTL, RetryInterval)
// in case the holder never publishes (a foreign client, an expiry).
//
// The lock is renewed by the Client's watchdog until Unlock (unless
// WithoutRenewal). Errors: ErrContextDone (joined with ctx.Err()),
// ErrUnavailable, ErrNoPermission (the Redis user's ACL refused a
// command, a key, or the subscription a blocked call needs: see
// Options.NoPubSub), ErrWrongType, ErrClosed, or an ErrInvalidArgument.
func (c *Client) Lock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, key, true, opts)
}

// TryLock makes exactly one attempt to acquire key. If another owner holds
// it, the error is a *NotAcquiredError (errors.Is(err, ErrNotAcquired))
// with the holder's remaining TTL.
func (c *Client) TryLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, key, false, opts)
}

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
	a := &waitCall{c: c, keys: keys, ttl: cfg.ttl, renew: cfg.renew, token: newToken(), base: base,
		mode: mode, wait: wait, queued: q && mode.queued(), ti: -1}
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
	l := a.l
	if err == nil && c.closed() {
		// Close ran while we were acquiring: don't hand out a lock nobody
		// will renew or release.
		rctx, cancel := context.WithTimeout(clientRelease(), c.opts.ReleaseTimeout)
		rerr := l.release(rctx)
		cancel()
		l.leftByClose(rerr) // if that release failed too
		err = ErrClosed
	}
	var fence uint64
	if err == nil {
		fence = l.fence
	}
	c.acquired(ctx, keys.Lock, start, a.attempts, wait, waited, fence, err)
	if err != nil {
		return nil, err
	}
	return &l.handle, nil
}

// waitCall is one acquiring call (Client.obtain): what its attempts and,
// if it blocks, its wait use, in one allocation. A blocked call costs
// this, its wake-up channel, its entry in the notifier and its place in
// the watchdog's retry heap: no goroutine of its own besides the
// caller's, no runtime timer, no closures.
type waitCall struct {
	// waiter is how the call is woken: by a hand-off or release message
	// (the notifier), by its retry time (the watchdog), or by Close.
	notify.Waiter
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
	attempts     int
	l            *lease // made at the grant, with first
	ti           int32  // slot in the watchdog's retry heap; -1: not there
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
		return false, 0, ctxDone(ctx)
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
			return false, 0, unavailable(errors.New("the acquire reply arrived after the lock's validity"))
		}
		return false, time.Millisecond, nil
	case err == nil && g.Acquired:
		l := c.newLease(a.first(), keys, lockConfig{ttl: a.ttl, renew: a.renew})
		l.ctx = hookContext(ctx)
		l.start(sent, g)
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
	case ambiguous(err) && g.Value != "":
		a.abandon(p, g.Value)
	}
	if ambiguous(err) && ctx.Err() == nil {
		c.evict.stale() // a new master may answer the next attempt
	}
	if cc, ok := c.rdb.(*redis.ClusterClient); ok && ambiguous(err) {
		cc.ReloadState(ctx) // a failover may have moved the slot: don't wait for the periodic reload
	}
	if ctx.Err() != nil {
		if isRefusal(err) {
			return false, 0, &refusedDoneError{ctxErr: ctx.Err(), refusal: err}
		}
		return false, 0, ctxDone(ctx)
	}
	return false, 0, unavailable(err)
}

// isKept reports whether err is a *keptError (apart from attempt, so
// that only a failed attempt pays for the variable errors.As needs).
func isKept(err error) bool {
	var kept *keptError
	return errors.As(err, &kept)
}

// hookContext is context.WithoutCancel(ctx): the context of the hooks of
// a lock acquired with ctx. A ctx that can never be cancelled and has no
// deadline (context.Background) is its own, without an allocation.
func hookContext(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); !ok && ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// abandon withdraws v (written by p) in the background and makes sure the
// next attempt uses a fresh token.
func (a *waitCall) abandon(p protocol.Protocol, v string) {
	a.withdrawIn(p, v)
	old := a.token
	a.token = newToken()
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
	c.background(func(ctx context.Context) error {
		probe.Point(probe.BeforeWithdraw, keys.Lock)
		return c.withdrawRetry(ctx, p, keys, v)
	})
}

// grant is the outcome of one acquire attempt as the engine keeps it: the
// protocol's Grant and, for a multi-key lock, the keys it holds with the
// fence of each.
type grant struct {
	protocol.Grant
	multi *multiKeys // nil: the lock's one key
}

// multiAcquirer is implemented by the multi-key protocols, whose grants
// carry a fence per key.
type multiAcquirer interface {
	acquireKeys(ctx context.Context, rdb redis.UniversalClient, token string, ttl time.Duration) (grant, error)
}

// acquireOnce makes one attempt of p.
func acquireOnce(ctx context.Context, rdb redis.UniversalClient, p protocol.Protocol, k protocol.Keys, token string, ttl time.Duration) (grant, error) {
	if m, ok := p.(multiAcquirer); ok {
		return m.acquireKeys(ctx, rdb, token, ttl)
	}
	g, err := p.Acquire(ctx, rdb, k, token, ttl)
	return grant{Grant: g}, err
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
		err := withdraw(ctx, c.rdb, p, keys, v)
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

// Key returns the locked key.
func (k *Lock) Key() string {
	if !k.held() {
		return ""
	}
	return k.l.keys.Lock
}

// Keys returns every key the lock holds: the one key of Lock and TryLock,
// or the keys of LockMulti in the order they are taken.
func (k *Lock) Keys() []string {
	if !k.held() {
		return nil
	}
	if k.l.multi != nil {
		return append([]string(nil), k.l.multi.keys...)
	}
	return []string{k.l.keys.Lock}
}

// Token returns the value that identifies this grant in Redis: the random
// token the key holds (or, for a protocol that rotates it, the value of the
// last renewal). For a shared, reentrant or semaphore lock it is this
// handle's member in the hold set (the key itself holds SharedValue or the
// owner id).
func (k *Lock) Token() string {
	if !k.held() {
		return ""
	}
	return k.l.token()
}

// FenceOf returns the fencing token of key, one of the lock's Keys (0 for
// another key). For a single-key lock it is Fence.
func (k *Lock) FenceOf(key string) uint64 {
	if !k.held() {
		return 0
	}
	if k.l.multi == nil {
		if key == k.l.keys.Lock {
			return k.l.fence
		}
		return 0
	}
	for i, kk := range k.l.multi.keys {
		if kk == key {
			return k.l.multi.fences[i]
		}
	}
	return 0
}

// Fence returns the fencing token of this grant: unique, and greater than
// that of every earlier grant of the same key (by any dlock client), also
// across expiries of the key. It is 0 for a protocol without fencing
// (package legacy). Every handle of one reentrant hold has the hold's
// fence; a multi-key lock returns that of Keys()[0] (see FenceOf). Pass it
// to the protected resource so it can reject a stale holder. It is drawn as
// max(counter+1, the server's clock in µs), so it keeps increasing after a
// restart without persistence or a failover that lost the counter's last
// writes, unless the new server's clock is behind the old one's.
func (k *Lock) Fence() uint64 {
	if !k.held() {
		return 0
	}
	return k.l.fence
}

// Deadline returns the moment until which the lock is certainly held: the
// time the last successful acquire or renewal was sent, plus its TTL, minus
// the drift allowance. After it the holder must assume the lock is gone.
func (k *Lock) Deadline() time.Time {
	if !k.held() {
		return time.Time{}
	}
	return k.l.Deadline()
}

// Done returns a channel closed when the lock is released or lost: by
// Unlock (or Close) before the release is sent, so it is closed before
// Redis can hand the key to another owner. A loss by expiry closes it
// from a timer at the Deadline, which a CPU-starved process may run late;
// Err and Deadline are exact.
func (k *Lock) Done() <-chan struct{} {
	if !k.held() {
		return closed
	}
	return k.l.doneChan()
}

// Err returns nil while the lock is held; from the moment Unlock begins,
// ErrReleased; after a loss, an error matching ErrLost and its cause
// (ErrExpired, ErrTaken or ErrUnreachable), also when Unlock's release
// finds the lock was lost before it. Past the Deadline it reports the loss
// at once, even if the deadline timer has not run yet.
func (k *Lock) Err() error {
	if !k.held() {
		return ErrNotHeld
	}
	return k.l.Err()
}

// Extend pushes the lock's expiry out to ttl from now (token-checked, by
// the lock's protocol) and moves the Deadline. The watchdog keeps renewing
// with the new TTL. Extend never shortens a lock: if the lock has more
// than ttl left, its expiry and Deadline stay where they are (the
// watchdog's renewals with the new TTL take effect once less than ttl is
// left). So an Extend that lands late, after a later renewal, cannot cut
// the lock short either. To give a lock up sooner, Unlock it.
// It returns a loss error if the lock is gone, or ErrUnavailable (the lock
// stays held until its deadline; the watchdog keeps trying). An Extend
// that races Close, which releases the lock, returns ErrClosed.
func (k *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if !k.held() {
		return ErrNotHeld
	}
	return k.l.extend(ctx, ttl)
}

// Unlock releases the lock if the key still holds its token, and wakes a
// waiter. The lock ends before the release is sent: Done is closed and Err
// returns ErrReleased from then on, whatever the release's outcome, so
// work bound to the lock stops before Redis can hand the key on (the next
// owner may get it before Unlock's reply comes back). Nothing renews it
// any more. Unlock is idempotent: after a success it returns nil again.
//
// After a Redis error (ErrUnavailable) the lock stays ended, but its key
// may still hold the token until its TTL runs out: retry Unlock to free
// it sooner (Close retries it too). If the first release may have run
// (its reply was lost), the retry returns nil whatever it finds (the key
// gone, or handed to a waiter): a release is never reported as a loss. If
// the lock was lost before the release, Unlock returns the loss error
// (matching ErrLost), Err returns it from then on, and nothing that is not
// its own is deleted.
func (k *Lock) Unlock(ctx context.Context) error {
	if !k.held() {
		return ErrNotHeld
	}
	return k.l.release(ctx)
}

// Do runs fn while holding key. fn's context is cancelled when the lock is
// lost, with context.Cause set to the loss error, so fn can stop in time,
// and it carries the lock: LockFrom(ctx) returns it, for its Fence and
// Token (a fenced write). The lock is released when fn returns. Do returns
// the acquire error, or fn's error joined with any loss or release error.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...LockOption) error {
	lk, err := c.Lock(ctx, key, opts...)
	if err != nil {
		return err
	}
	return c.run(ctx, lk, fn)
}

// run runs fn under lk (see Do) and releases lk.
func (c *Client) run(ctx context.Context, lk *Lock, fn func(ctx context.Context) error) error {
	fctx, stop := watchLoss(ctx, lk)
	fctx = context.WithValue(fctx, lockCtxKey{}, lk)
	ferr := fn(fctx)
	stop()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.ReleaseTimeout)
	defer rcancel()
	return errors.Join(ferr, lk.Unlock(rctx))
}

// lockCtxKey is the context key of the lock Do gives its function.
type lockCtxKey struct{}

// LockFrom returns the lock that ctx carries: the lock held for the
// function of Client.Do or Client.DoMulti, or the leadership's lock in
// Election.Run's OnStartedLeading (see Leadership.Lock), when ctx is that
// function's context or derived from it. Use its Fence and Token for
// fenced writes (package fenced). ok is false if ctx carries no lock; the
// innermost Do's lock wins when they nest.
func LockFrom(ctx context.Context) (lk *Lock, ok bool) {
	if ctx == nil {
		return nil, false
	}
	lk, ok = ctx.Value(lockCtxKey{}).(*Lock)
	return lk, ok && lk != nil
}

// watchLoss returns a context derived from ctx that is cancelled, with
// context.Cause set to the loss error, when lk is lost; stop ends the watch
// and cancels the context.
func watchLoss(ctx context.Context, lk *Lock) (context.Context, func()) {
	fctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		select {
		case <-lk.Done():
			cancel(lk.Err())
		case <-done:
		}
	}()
	return fctx, func() { close(done); cancel(nil) }
}
