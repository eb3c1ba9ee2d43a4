// acquire.go owns how a call acquires a key: its attempts (one for
// TryLock; for Lock, as many as its wait needs), the grant that makes a
// lease, and the withdrawal of an attempt that may have taken the key for
// a caller that has gone.

package engine

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/oneline"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Request is one acquiring call (Engine.Acquire). Its inputs are already
// validated.
type Request struct {
	Keys  protocol.Keys
	Proto Protocol
	TTL   time.Duration
	Renew bool // renewed by the watchdog
	// Wait: Lock, which waits until granted or ctx ends; else TryLock,
	// which makes one attempt.
	Wait bool
	// NewLease makes the lease of a grant, and the handle package dlock
	// wraps it in (made together: one allocation).
	NewLease func() (*Lease, any)
}

// Acquired is the outcome of an acquiring call.
type Acquired struct {
	Lease    *Lease // the granted lease, nil if none
	Handle   any    // what NewLease made with Lease
	Attempts int
	Waited   bool // the call slept at least once
}

// Acquire runs the call r: the attempt and wait loop every kind of lock
// shares.
//
// A token is never used again once it was given up. When an attempt ends
// ambiguously (its reply was lost: it may have taken the key, or queued
// us), fails with keys it took still held (a multi-slot attempt, whatever
// the error, even one that ends the call), or its grant came back after
// the validity it bought, the engine withdraws that token in the
// background and the next attempt, if any, uses a fresh one. Reusing it
// would be unsafe: the withdrawal runs on another pooled connection, so
// the retry can reach Redis first, be granted (the key holds our token),
// and then the withdrawal lands and frees or hands off the key under a
// caller who believes it holds it. Waiting for the withdrawal before
// retrying would not be enough either: the lost attempt itself may still
// be in flight. So the withdrawal leaves a tombstone for the token that
// every acquire script honours (internal/lualib/queue.lua): the given-up
// token cannot be granted or queued by an attempt that lands late, and
// nothing is left held by nobody. A fresh token loses the waiter's place
// in the queue, which only happens after such a fault.
func (e *Engine) Acquire(ctx context.Context, r Request) (Acquired, error) {
	// A protocol whose waiters queue in Redis: queued waiters unless
	// Barging; TryLock never queues.
	mode := ModeTry
	switch {
	case e.barging:
		mode = ModeBarge
	case r.Wait:
		mode = ModeJoin
	}
	if err := e.gate(ctx); err != nil {
		return Acquired{}, err
	}
	q := r.Proto.Queued()
	a := &waitCall{e: e, r: r, mode: mode, queued: q && mode.Queued(), Sleeper: NewSleeper()}
	a.token = newTokenIn(&a.tok)
	var err error
	if r.Wait {
		err = e.wait(ctx, a)
	} else {
		_, _, err = a.attempt(ctx, a.mode)
	}
	if err == nil && e.Closed() {
		// Close ran while we were acquiring: don't hand out a lock nobody
		// will renew or release.
		rctx, cancel := context.WithTimeout(ClientRelease(), e.releaseTimeout)
		rerr := a.res.Lease.Release(rctx)
		cancel()
		a.res.Lease.LeftByClose(rerr) // if that release failed too
		err = errs.ErrClosed
	}
	return a.res, err
}

// waitCall is one acquiring call (Engine.Acquire): what its attempts and,
// if it blocks, its wait use, in one allocation. A blocked call costs
// this, its wake-up channel, its entry in the notifier and its place in
// the watchdog's retry heap: no goroutine of its own besides the
// caller's, no runtime timer, no closures.
type waitCall struct {
	// Sleeper is how the call is woken: by a hand-off or release message
	// (the notifier), by its retry time (the engine's retry clock), or by
	// Close.
	Sleeper
	e *Engine
	r Request
	// token is the call's current token: a new one after a withdrawal.
	token string
	// mode is the mode of the call's first attempt; queued: the attempts
	// keep the caller in the key's FIFO queue (see Engine.wait).
	mode   Mode
	queued bool
	res    Acquired // the attempts, and the grant
	// tok holds the bytes of the call's first token (see newTokenIn).
	tok [keyspace.TokenLen]byte
	// args is the storage of the first attempt's command (see ArgBuf),
	// once argsUsed.
	args     ArgBuf
	argsUsed bool
}

// retryMode returns the mode of the attempts after the first: the first's,
// except a queued waiter's, which refresh its queue entry.
func (a *waitCall) retryMode() Mode {
	if a.queued {
		return ModeQueued
	}
	return a.mode
}

// attempt makes one attempt in mode m. It reports whether it acquired,
// and if not, how long the current holder still has (<= 0: unknown).
func (a *waitCall) attempt(ctx context.Context, m Mode) (bool, time.Duration, error) {
	e, keys, ttl := a.e, a.r.Keys, a.r.TTL
	if err := ctx.Err(); err != nil {
		return false, 0, errs.CtxDone(ctx)
	}
	if err := e.gate(ctx); err != nil {
		return false, 0, err // a failover or CONFIG SET since the last check
	}
	if _, ok := a.r.Proto.(Joiner); ok {
		if err := e.withdrawing.await(ctx, keys.Lock); err != nil {
			return false, 0, err
		}
	}
	a.res.Attempts++
	sent := time.Now()
	at := Attempt{Mode: m, Queue: e.queue}
	if !a.argsUsed {
		// The call's first attempt builds its command in the call (see
		// ArgBuf); a later one, in storage of its own.
		a.argsUsed = true
		a.args.Keys, a.args.Value = &a.r.Keys, a.token
		at.Args = &a.args
	}
	g, err := a.r.Proto.Acquire(ctx, at, keys, a.token, ttl)
	if err == nil && g.Acquired {
		probe.Point(probe.AfterGrant, keys.Lock)
	}
	switch {
	case err == nil && g.Acquired && time.Now().After(sent.Add(ttl-e.timing.Drift(ttl))):
		// The grant's reply came back after the validity it bought: the
		// lock may already be someone else's. Give it back, try again.
		a.abandon(g.Value)
		if !a.r.Wait {
			return false, 0, errs.Unavailable(errors.New("the acquire reply arrived after the lock's validity"))
		}
		return false, time.Millisecond, nil
	case err == nil && g.Acquired:
		l, h := a.r.NewLease()
		e.InitLease(l, a.r.Proto, keys, ttl, a.r.Renew, ctx)
		l.Start(sent, g)
		a.res.Lease, a.res.Handle = l, h
		return true, 0, nil
	case err == nil && !a.r.Wait:
		return false, 0, &errs.NotAcquiredError{Key: keys.Lock, TTL: g.HolderTTL}
	case err == nil:
		return false, g.HolderTTL, nil
	}
	return false, 0, a.failed(ctx, sent, g, err)
}

// failed handles the error err of an attempt sent at sent, whose grant
// was g: it withdraws what the attempt may have left, and returns the
// error the attempt ends with.
func (a *waitCall) failed(ctx context.Context, sent time.Time, g Grant, err error) error {
	e := a.e
	switch {
	case isKept(err):
		// A multi-slot acquire failed with slots it took still held
		// (not rolled back, or the roll-back failed): whatever the
		// acquire error, even a definite one that ends the call,
		// withdraw them, or they stay held by nobody for the TTL.
		a.abandon(g.Value)
		if errors.Is(err, errs.ErrWrongType) || errors.Is(err, errs.ErrInvalidArgument) {
			return err
		}
	case errors.Is(err, errs.ErrReplicaAck):
		// The grant was given back by the protocol; if that give-back
		// got no reply, the key may still hold the token: withdraw it
		// again (token-checked, harmless if it is gone).
		a.abandon(a.token)
		return err
	case errors.Is(err, errs.ErrWrongType), errors.Is(err, errs.ErrInvalidArgument):
		return err // the protocol's own verdict, not a Redis failure
	case Ambiguous(err) && g.Value != "":
		a.abandon(g.Value)
	case !a.r.Wait && rexec.MayFollowRun(err) && g.Value != "":
		// Refused (or READONLY) on its last try, but go-redis may have
		// sent it before by itself, after a connection error that lost
		// the reply of a try that ran: a try ends here, so withdraw. (A
		// waiting call keeps its token: its next attempt finds a grant
		// its own, and giving up withdraws it.)
		a.abandon(g.Value)
	}
	if Ambiguous(err) && ctx.Err() == nil {
		e.stale() // a new master may answer the next attempt
	}
	if cc, ok := e.rdb.(*redis.ClusterClient); ok && Ambiguous(err) {
		cc.ReloadState(ctx) // a failover may have moved the slot: don't wait for the periodic reload
	}
	if ctx.Err() != nil {
		if rexec.IsRefusal(err) {
			return errs.RefusedDone(ctx.Err(), err)
		}
		// The context ended during the call: Redis failed, or had not
		// answered yet. Say which, so that the caller can tell a key
		// still held from a silent Redis (not when the caller cancelled).
		switch {
		case errors.Is(ctx.Err(), context.Canceled):
			return errs.CtxDone(ctx)
		case errors.Is(err, context.DeadlineExceeded) && time.Since(sent) < noReplyAfter:
			return errs.CtxDone(ctx) // sent just before the deadline: the deadline cut it, not Redis
		case errors.Is(err, context.DeadlineExceeded):
			return errs.CtxDoneAfter(ctx, errs.NoReply(time.Since(sent), err))
		}
		return errs.CtxDoneAfter(ctx, errs.Unavailable(err))
	}
	return errs.Unavailable(err)
}

// noReplyAfter is how long a call cut off by its context's deadline must
// have waited for its reply before the error says Redis did not reply
// (ErrNoReply): a call sent a moment before the deadline says nothing about
// Redis.
const noReplyAfter = 250 * time.Millisecond

// KeptError is a multi-slot acquire that failed (Acquire, possibly nil:
// a slot was held) while the slots it had taken before may still hold the
// token: a queued attempt keeps them (Rollback nil), or the roll-back of a
// try or barge attempt failed (Rollback). The engine withdraws the token
// whatever Acquire was, even a definite reply such as a wrong type. It
// unwraps to Acquire alone, so whether the acquire was ambiguous, a wrong
// type or a refusal is judged on it, not on the roll-back's error (a
// READONLY or BUSY reply there says nothing about the acquire).
type KeptError struct{ Acquire, Rollback error }

func (e *KeptError) Error() string {
	if e.Rollback == nil {
		return oneline.Msg(e.Acquire)
	}
	a := "a key is held"
	if e.Acquire != nil {
		a = oneline.Msg(e.Acquire)
	}
	return a + "; and the keys taken before could not be given back: " + oneline.Msg(e.Rollback)
}

func (e *KeptError) Unwrap() error { return e.Acquire }

// isKept reports whether err is a *KeptError (apart from attempt, so
// that only a failed attempt pays for the variable errors.As needs).
func isKept(err error) bool {
	var kept *KeptError
	return errors.As(err, &kept)
}
