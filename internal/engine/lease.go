package engine

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/errs"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/oneline"
	"github.com/dlock-go/dlock/protocol"
)

type leaseState uint8

// MultiKeys are a multi-key lock's keys, in order, and the fence of each.
type MultiKeys struct {
	Keys   []string
	Fences []uint64
}

// Grant is the outcome of one acquire attempt as the engine keeps it: the
// protocol's Grant and, for a multi-key lock, the keys it holds with the
// fence of each.
type Grant struct {
	protocol.Grant
	Multi *MultiKeys // nil: the lock's one key
}

const (
	stateHeld leaseState = iota
	stateReleased
	stateLost
)

// Lease is the client-side state of one grant, whatever its Protocol: its
// validity deadline, its renewal schedule and its lost-lock signal.
// Package dlock's Lock wraps one.
type Lease struct {
	e          *Engine
	proto      Protocol
	keys       protocol.Keys
	renew      bool
	fence      uint64
	multi      *MultiKeys // a multi-key lock's keys and fences (nil: keys.Lock alone)
	acquiredAt time.Time
	// ctx is the acquire call's ctx; its hooks' context (see Context) is
	// made from it on first use, once (most locks never need one).
	ctx     context.Context
	hctx    context.Context
	hctxSet sync.Once

	// opMu serialises the renewals and the release of this lease, so a
	// protocol that rotates the stored value never races itself. The
	// watchdog holds it across a pipeline round trip.
	opMu sync.Mutex

	mu sync.Mutex // guards every field below
	// value is what the lock key holds for us (the token).
	value string
	// alt is what the key may hold instead of value: a renewal that would
	// have stored it (a protocol that rotates values) got no reply. A
	// "held by another owner" reply is checked against it before any loss
	// is declared.
	alt string
	// ttl is the TTL of the last successful acquire or renewal.
	ttl time.Duration
	// deadline is when the holder must assume the lease is gone: the send
	// time of the acquire or of a successful renewal, plus its TTL, minus
	// drift, the latest of these (no renewal moves the key's expiry
	// earlier: see renewed). Monotonic clock.
	deadline time.Time
	// nextRenew is when the watchdog renews next.
	nextRenew time.Time
	state     leaseState
	err       error // why the lease ended; nil while held
	// done is closed once, when the lease is released or lost; made by
	// the first Done call (most locks never need one).
	done     chan struct{}
	timer    leaseTimer // fires at deadline (the watchdog's deadline heap)
	renewErr error      // last renewal's Redis error, nil after a success
	renewing bool       // a renewal is in flight (its reply not applied yet)
	// wd is the lease's place in the watchdog's heaps (guarded by wd.mu).
	wd wdEntry
	// releaseTried: a release whose reply was lost may have deleted the key,
	// so a retried Unlock that finds it gone has succeeded (unless the
	// release's reply tells, see resendTold); releaseSent is when the
	// first such release was sent.
	releaseTried bool
	releaseSent  time.Time
	// relValue and relCall: the last release call built (Protocol.Release)
	// and the value it releases. A retry of that release sends this very
	// call again (see releaseCall).
	relValue string
	relCall  protocol.Call
	// ending: the lease ended as released when its release began (see
	// endForRelease), and no reply has confirmed the release yet: a
	// retried Unlock, or Close, sends it again, and a reply that finds the
	// lock was lost before it turns the end into that loss.
	ending bool
	// confirmed: a reply confirmed the release (confirmRelease).
	confirmed bool
	// unsent: the lease ended as released (endForRelease) and no release
	// of it may have run yet: the caller let go, and its release waits
	// for opMu (a renewal in flight holds it). The deadline passing
	// meanwhile clears ending, but the release must still be sent: the
	// renewal may have moved the lease out on the server (see
	// releaseLocked).
	unsent bool
	// lossUnlocked (guarded by opMu): an Unlock has returned the loss, and
	// the Release hook reported it; repeated Unlocks of a lost lock return
	// the loss again without reporting another release.
	lossUnlocked bool

	// fenceUntil (guarded by opMu, nanoseconds since the watchdog's epoch)
	// is when the fence counter expires at the earliest, as last pushed
	// out by the grant or a bulk renewal (see leanFence).
	fenceUntil int64
	// leanLock and leanToken (guarded by opMu) are the lock key and the
	// token as a bulk renewal's arguments: boxed once, not at every
	// renewal (see bulkRenewal).
	leanLock, leanToken any
	// relArgs is the storage of the lease's first release command (see
	// ArgBuf), once relArgsUsed is set by the release that takes it.
	relArgs     ArgBuf
	relArgsUsed atomic.Bool
}

// InitLease sets l up for a grant of keys by proto, for ttl, renewed by
// the watchdog if renew; ctx is the acquiring call's: its values are the
// hooks' (see hookContext). Start makes it live.
func (e *Engine) InitLease(l *Lease, proto Protocol, keys protocol.Keys, ttl time.Duration, renew bool, ctx context.Context) {
	l.e, l.proto, l.keys, l.renew, l.ttl, l.ctx = e, proto, keys, renew, ttl, ctx
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

// Start makes the lease live after an acquire sent at sent succeeded.
func (l *Lease) Start(sent time.Time, g Grant) {
	l.fence = g.Fence
	l.multi = g.Multi
	l.acquiredAt = sent
	l.mu.Lock()
	l.value = g.Value
	l.setDeadlineLocked(sent, l.ttl)
	l.timer = leaseTimer{l} // armed by wd.add
	l.mu.Unlock()
	l.fenceUntil = l.e.wd.at(sent.Add(FenceTTL(l.ttl)))
	l.e.Stats.Held.Add(1)
	l.e.wd.add(l)
}

func (l *Lease) Token() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// setDeadlineLocked records a successful acquire or renewal sent at sent.
func (l *Lease) setDeadlineLocked(sent time.Time, ttl time.Duration) {
	l.ttl = ttl
	l.deadline = sent.Add(ttl - l.e.timing.Drift(ttl))
	l.nextRenew = sent.Add(l.e.timing.RenewEvery(ttl))
	l.renewErr = nil
}

// onDeadline runs when the deadline timer fires. A renewal may have moved
// the deadline meanwhile; if not, the lease is lost, and onDeadline
// returns the loss's report (see Lose).
func (l *Lease) onDeadline() (lost func()) {
	l.mu.Lock()
	if l.state != stateHeld {
		if l.ending {
			// A release began and no reply confirmed it: it ran, or the key
			// expired by its TTL by now. Either way the hold ended because
			// the caller released it, not by a loss. (A release still
			// waiting for opMu behind a renewal is sent all the same:
			// unsent.)
			l.ending = false
			l.e.Stats.Released.Add(1)
			l.e.Stats.ReleasesLeft.Add(1)
		}
		l.mu.Unlock()
		return nil
	}
	if d := time.Until(l.deadline); d > 0 {
		l.timer.Reset(d)
		l.mu.Unlock()
		return nil
	}
	cause := errs.ErrExpired
	switch {
	case l.renewErr != nil:
		cause = oneline.Chain(errs.ErrUnreachable, l.renewErr)
	case l.renewing:
		cause = oneline.Chain(errs.ErrUnreachable, errors.New("no reply to the renewal before the deadline"))
	}
	l.mu.Unlock()
	lost, _ = l.Lose(l.Context(), cause)
	return lost
}

// held reports whether the lease is held now.
func (l *Lease) held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == stateHeld
}

func causeOf(code int64) error {
	switch code {
	case codeGone:
		return errs.ErrExpired
	case codeWrongType:
		return oneline.Chain(errs.ErrTaken, errs.ErrWrongType)
	default:
		return errs.ErrTaken
	}
}

// lose ends a held lease with cause, closes Done at once, and returns the
// loss error and, if this call ended it, the loss's report: the Lost hook
// (with ctx). Only the first call has effect. Done closes here, not after
// the hook, so work bound to it (Do's context, an elected leader's) stops
// as soon as the loss is known, however long a hook takes. Hooks may call
// back into the Client, so the caller runs the report once it holds no
// lock (an Unlock or Extend that found the loss, before it returns), or
// hands it to the watchdog's reporters (wd.report).
func (l *Lease) Lose(ctx context.Context, cause error) (lost func(), err error) {
	return l.end(ctx, cause, false, false)
}

// loseEnding is lose for a lease whose release began (see endForRelease)
// and found, or could not undo, a loss: the release's own reply that the
// key was no longer ours, or Close giving up on it. A lease whose release
// was not confirmed yet ends lost instead of released.
func (l *Lease) loseEnding(ctx context.Context, cause error) (lost func(), err error) {
	return l.end(ctx, cause, true, false)
}

// end is lose, and loseEnding if ending. taken (with ending): the
// release's reply tells the hold was taken before the release ran
// (codeStolen), so the lease ends lost even if its deadline passed while
// the release was in flight and onDeadline took the unconfirmed release
// for done.
func (l *Lease) end(ctx context.Context, cause error, ending, taken bool) (lost func(), err error) {
	l.mu.Lock()
	held := l.state == stateHeld
	late := taken && l.state == stateReleased && !l.confirmed
	if !held && !(ending && (l.ending || late)) {
		err := l.err
		l.mu.Unlock()
		return nil, err
	}
	l.state, l.ending = stateLost, false
	l.err = errs.Lost(l.keys.Lock, cause)
	l.timer.Stop()
	err, value := l.err, l.value
	if held && l.done != nil {
		close(l.done) // Done made before the loss; one made later is closedChan
	}
	l.mu.Unlock()

	l.e.wd.remove(l)
	if held {
		l.e.Stats.Held.Add(-1) // an ending lease was counted out when its release began
	}
	l.e.Stats.Lost.Add(1)
	if cause != errs.ErrLeftByClose { // Close logs what it leaves, once
		l.e.log.Warn("dlock: lock lost", "key", l.keys.Lock, "fence", l.fence,
			"token", ShortToken(value), "cause", cause)
	}
	info := LostInfo{Key: l.keys.Lock, Fence: l.fence, Held: time.Since(l.acquiredAt), Cause: cause}
	return func() { l.reportLoss(ctx, info) }, err
}

// reportLoss calls the Lost hook (Done has closed already, see Lose).
func (l *Lease) reportLoss(ctx context.Context, info LostInfo) {
	if h := l.e.hooksNow().Lost; h != nil {
		h(ctx, info)
	}
}

// closedChan is the Done channel of a lease that ended before anyone asked.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Done returns the lease's done channel, making it on first use.
func (l *Lease) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		if l.state != stateHeld {
			return closedChan
		}
		l.done = make(chan struct{})
	}
	return l.done
}

func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Err is exact: past the deadline it reports the loss even if the
// deadline timer has not run yet (on a starved machine it runs late).
func (l *Lease) Err() error {
	lost, err := l.ErrNow()
	if lost != nil {
		lost()
	}
	return err
}

// ErrNow is Err for callers that hold a lock: the report of a loss it
// finds is theirs to run once they hold none (see Lose).
func (l *Lease) ErrNow() (lost func(), err error) {
	l.mu.Lock()
	late := l.state == stateHeld && l.timer.l != nil && !time.Now().Before(l.deadline)
	l.mu.Unlock()
	if late {
		lost = l.onDeadline()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return lost, l.err
}

// Keys returns the keys of the lease's lock.
func (l *Lease) Keys() protocol.Keys { return l.keys }

// Multi returns a multi-key lock's keys and the fence of each (nil: the
// lock's one key).
func (l *Lease) Multi() *MultiKeys { return l.multi }

// Fence returns the grant's fencing token.
func (l *Lease) Fence() uint64 { return l.fence }

// Context returns the lease's hook context: the acquire call's ctx
// without its cancellation (see InitLease), the context of the hooks the
// watchdog calls (package dlock's Hooks).
func (l *Lease) Context() context.Context {
	l.hctxSet.Do(func() { l.hctx = hookContext(l.ctx) })
	return l.hctx
}
