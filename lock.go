// lock.go owns the Lock handle: taking one (Lock, TryLock), what it
// tells (Key, Token, Fence, Deadline, Done, Err), Extend, Unlock and Do.
// How a call acquires (its attempts, its wait, a withdrawal) is in
// internal/engine (acquire.go, wait.go, withdraw.go).

package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/oneline"
)

// Lock is a held lock: exclusive, or (by what took it) a read lock
// (RWLock), a reentrant owner's handle (Reentrant), semaphore permits
// (Semaphore), or several keys (LockMulti). Its methods are safe for
// concurrent use by multiple goroutines, and on a nil *Lock (or a zero
// Lock), which is a lock not held: Err, Extend and Unlock return
// ErrNotHeld, Done is closed, and the rest return zero values.
type Lock struct {
	l *engine.Lease
}

// heldLock is a lease and its Lock, made together (one allocation, not
// two).
type heldLock struct {
	lease engine.Lease
	lock  Lock
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
	return c.acquire(ctx, key, true, opts, nil)
}

// TryLock makes exactly one attempt to acquire key. If another owner holds
// it, the error is a *NotAcquiredError (errors.Is(err, ErrNotAcquired))
// with the holder's remaining TTL.
func (c *Client) TryLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, key, false, opts, nil)
}

// Key returns the locked key.
func (k *Lock) Key() string {
	if !k.held() {
		return ""
	}
	return k.l.Keys().Lock
}

// Keys returns every key the lock holds: the one key of Lock and TryLock,
// or the keys of LockMulti in the order they are taken.
func (k *Lock) Keys() []string {
	if !k.held() {
		return nil
	}
	if m := k.l.Multi(); m != nil {
		return append([]string(nil), m.Keys...)
	}
	return []string{k.l.Keys().Lock}
}

// Token returns the value that identifies this grant in Redis: the random
// token the key holds (or, for a protocol that rotates it, the value of the
// last renewal). For a shared, reentrant or semaphore lock it is this
// handle's member in the hold set (the key itself holds "dlock:shared", or
// "dlock:reentrant:" and the owner id).
func (k *Lock) Token() string {
	if !k.held() {
		return ""
	}
	return k.l.Token()
}

// FenceOf returns the fencing token of key, one of the lock's Keys (0 for
// another key). For a single-key lock it is Fence.
func (k *Lock) FenceOf(key string) uint64 {
	if !k.held() {
		return 0
	}
	m := k.l.Multi()
	if m == nil {
		if key == k.l.Keys().Lock {
			return k.l.Fence()
		}
		return 0
	}
	for i, kk := range m.Keys {
		if kk == key {
			return m.Fences[i]
		}
	}
	return 0
}

// Fence returns the fencing token of this grant: unique, and greater than
// that of every earlier grant of the same key (by any dlock client), also
// across expiries of the key. It is 0 for a protocol without fencing
// (package legacy). Every handle of one reentrant hold has the hold's
// fence; a multi-key lock returns that of Keys()[0] (see FenceOf). Pass it
// to the protected resource so it can reject a stale holder. It keeps
// increasing after a restart or a failover that lost the counter, unless
// the new server's clock is behind the old one's (docs/design.md).
func (k *Lock) Fence() uint64 {
	if !k.held() {
		return 0
	}
	return k.l.Fence()
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
	return k.l.Done()
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
// with the new TTL. Extend never shortens a lock, even when it lands
// late: if the lock has more than ttl left, its expiry and Deadline stay.
// To give a lock up sooner, Unlock it.
// It returns a loss error if the lock is gone, or ErrUnavailable (the lock
// stays held until its deadline; the watchdog keeps trying). An Extend
// that races Close, which releases the lock, returns ErrClosed.
func (k *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if !k.held() {
		return ErrNotHeld
	}
	return k.l.Extend(ctx, ttl)
}

// Unlock releases the lock if the key still holds its token, and wakes a
// waiter. The lock ends before the release is sent: Done is closed and Err
// returns ErrReleased from then on, whatever the release's outcome, so
// work bound to the lock stops before the next owner can get the key.
// Unlock is idempotent: after a success it returns nil again.
//
// A release that fails on a connection error or a refusal (a failover
// under way) is sent again, backing off, until it runs, the context ends,
// or Options.ReleaseTimeout or the lock's deadline passes; a release that
// may have run already is never reported as a loss. After a Redis error
// (ErrUnavailable) the key may hold the token until its TTL: retry Unlock
// to free it sooner (Close retries it too). If the lock was lost before
// the release, Unlock returns the loss error (matching ErrLost), and
// nothing that is not its own is deleted.
func (k *Lock) Unlock(ctx context.Context) error {
	if !k.held() {
		return ErrNotHeld
	}
	return k.l.Release(ctx)
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
	return oneline.Join(ferr, lk.Unlock(rctx))
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
