package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/errs"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/oneline"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

type leaseState uint8

// multiKeys are a multi-key lock's keys, in order, and the fence of each.
type multiKeys struct {
	keys   []string
	fences []uint64
}

const (
	stateHeld leaseState = iota
	stateReleased
	stateLost
)

// lease is the client-side state of one grant, whatever its Protocol: its
// validity deadline, its renewal schedule and its lost-lock signal.
type lease struct {
	// handle is the lease's Lock, made with it (one allocation, not two).
	handle     Lock
	c          *Client
	proto      protocol.Protocol
	keys       protocol.Keys
	renew      bool
	fence      uint64
	multi      *multiKeys // a multi-key lock's keys and fences (nil: keys.Lock alone)
	acquiredAt time.Time
	// ctx is the acquire call's ctx without its cancellation: the context
	// of the hooks the watchdog calls (see Hooks).
	ctx context.Context

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
	// bulkLean (guarded by opMu): the lease's renewal is extend.lua's
	// single-key call, the one extend_many serves (see renewal).
	bulkLean bool
	// leanLock and leanToken (guarded by opMu) are the lock key and the
	// token as a bulk renewal's arguments: boxed once, not at every
	// renewal (see bulkRenewal).
	leanLock, leanToken any
}

func (c *Client) newLease(proto protocol.Protocol, keys protocol.Keys, cfg lockConfig) *lease {
	l := &lease{c: c, proto: proto, keys: keys, renew: cfg.renew, ttl: cfg.ttl, ctx: context.Background()}
	l.handle.l = l
	return l
}

// start makes the lease live after an acquire sent at sent succeeded.
func (l *lease) start(sent time.Time, g grant) {
	l.fence = g.Fence
	l.multi = g.multi
	l.acquiredAt = sent
	l.mu.Lock()
	l.value = g.Value
	l.setDeadlineLocked(sent, l.ttl)
	l.timer = leaseTimer{l} // armed by wd.add
	l.mu.Unlock()
	l.fenceUntil = l.c.wd.at(sent.Add(fenceTTL(l.ttl)))
	l.c.stats.held.Add(1)
	l.c.wd.add(l)
}

func (l *lease) token() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// setDeadlineLocked records a successful acquire or renewal sent at sent.
func (l *lease) setDeadlineLocked(sent time.Time, ttl time.Duration) {
	l.ttl = ttl
	l.deadline = sent.Add(ttl - l.c.opts.drift(ttl))
	l.nextRenew = sent.Add(l.c.opts.renewEvery(ttl))
	l.renewErr = nil
}

// onDeadline runs when the deadline timer fires. A renewal may have moved
// the deadline meanwhile; if not, the lease is lost, and onDeadline
// returns the loss's report (see lose).
func (l *lease) onDeadline() (lost func()) {
	l.mu.Lock()
	if l.state != stateHeld {
		if l.ending {
			// A release began and no reply confirmed it: it ran, or the key
			// expired by its TTL by now. Either way the hold ended because
			// the caller released it, not by a loss. (A release still
			// waiting for opMu behind a renewal is sent all the same:
			// unsent.)
			l.ending = false
			l.c.stats.released.Add(1)
			l.c.stats.releasesLeft.Add(1)
		}
		l.mu.Unlock()
		return nil
	}
	if d := time.Until(l.deadline); d > 0 {
		l.timer.Reset(d)
		l.mu.Unlock()
		return nil
	}
	cause := ErrExpired
	switch {
	case l.renewErr != nil:
		cause = oneline.Chain(ErrUnreachable, l.renewErr)
	case l.renewing:
		cause = oneline.Chain(ErrUnreachable, errors.New("no reply to the renewal before the deadline"))
	}
	l.mu.Unlock()
	lost, _ = l.lose(l.ctx, cause)
	return lost
}

// renewal builds the lease's renewal for ttl with token, the value the
// key holds: as a bulk renewal if extend_many can serve it (bulk), else as
// its protocol's call; next is what the key holds once renewed. Callers
// hold opMu.
func (l *lease) renewal(ttl time.Duration, token string) (c protocol.Call, br bulkRenewal, next string, bulk bool) {
	if l.bulkLean {
		if l.leanLock == nil {
			l.leanLock = l.keys.Lock
		}
		if s, ok := l.leanToken.(string); !ok || s != token {
			l.leanToken = token
		}
		return c, bulkRenewal{lock: l.keys.Lock, fence: l.keys.Fence, token: token,
			ttl: ttl.Milliseconds(), fttl: fenceTTL(ttl).Milliseconds(),
			lockArg: l.leanLock, tokenArg: l.leanToken}, token, true
	}
	c, next = l.proto.Renew(l.keys, token, ttl)
	br, bulk = asBulkRenewal(c)
	// A token lock's renewal is always this call: build it directly from
	// now on, without the protocol's call and its allocations.
	l.bulkLean = bulk && next == token && br.token == token && br.lock == l.keys.Lock &&
		br.fence == l.keys.Fence && br.ttl == ttl.Milliseconds() && br.fttl == fenceTTL(ttl).Milliseconds()
	return c, br, next, bulk
}

// setRenewing marks a renewal in flight until renewed applies its reply.
func (l *lease) setRenewing() {
	l.mu.Lock()
	l.renewing = true
	l.mu.Unlock()
}

// direct reports whether the lease's protocol renews by itself.
func (l *lease) direct() bool {
	_, ok := l.proto.(protocol.DirectProtocol)
	return ok
}

// renewed applies the reply of a renewal sent at sent, which stores next
// in the key if it succeeds. Callers hold opMu. It returns nil, the loss
// error, or the Redis error (the lease stays held until its deadline),
// with what the hooks are owed, which the caller reports once it holds no
// lock: info for the Renew hook and, if the renewal found the lease lost,
// the loss's report (see lose). ctx is the Lost hook's.
func (l *lease) renewed(ctx context.Context, sent time.Time, ttl time.Duration, next string, code int64, err error) (info RenewInfo, lost func(), rerr error) {
	info = RenewInfo{Key: l.keys.Lock, Fence: l.fence}
	l.mu.Lock()
	l.renewing = false
	l.mu.Unlock()
	if err != nil {
		info.Err = err
		l.c.stats.renewalFailures.Add(1)
		l.mu.Lock()
		if l.state == stateHeld {
			l.renewErr = err
			if next != l.value && ambiguous(err) {
				l.alt = next
			}
			// The renewal may have run, or may still land (a lost reply, a
			// command delayed, a WAIT that timed out after the PEXPIRE):
			// the deadline stands even so, as no renewal moves the key's
			// expiry earlier (see protocol.Protocol's Renew).
		}
		l.mu.Unlock()
		l.c.opts.Logger.Debug("dlock: renewal failed", "key", l.keys.Lock, "err", err)
		return info, nil, errs.Unavailable(err)
	}
	if code == codeOther && l.swapAlt() {
		return info, nil, errRetryAlt
	}
	if (code == codeGone || code == codeOther) && l.c.closed() {
		// Close releases every lock it holds without waiting for a
		// renewal in flight (an Extend): the key gone, or handed to a
		// waiter, is its release, most likely. Not a loss: Close applies
		// its release's reply once the caller lets go of opMu (released,
		// or lost if the key was gone before), or ends the lock itself.
		info.Err = ErrClosed
		return info, nil, ErrClosed
	}
	if code != codeOK {
		lost, err = l.lose(ctx, causeOf(code))
		info.Err = err
		return info, lost, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.value, l.alt = next, "" // the key holds next now, whatever we conclude below
	if l.state != stateHeld {
		info.Err = l.err
		return info, nil, l.err
	}
	if time.Now().After(sent.Add(ttl - l.c.opts.drift(ttl))) {
		// The reply came back after the validity it bought: too late to count.
		l.renewErr = errors.New("renewal reply arrived after its validity")
		info.Err = l.renewErr
		return info, nil, nil
	}
	oldDeadline, oldNext := l.deadline, l.nextRenew
	l.setDeadlineLocked(sent, ttl)
	// No renewal moves the key's expiry earlier on the server (see
	// protocol.Protocol's Renew): one for less than the lease has left (an
	// Extend to a shorter TTL) leaves it, and the deadline, where they
	// were. It only moves the next renewal earlier, onto the new TTL's
	// schedule: the watchdog's heaps keep a later time only lazily (see
	// watchdog), so move it now.
	l.deadline = later(l.deadline, oldDeadline)
	if l.nextRenew.Before(oldNext) {
		l.c.wd.renewEarlier(l, l.nextRenew, l.c.opts.renewEvery(ttl))
	}
	l.c.stats.renewals.Add(1)
	if l.c.opts.Logger.Enabled(context.Background(), slog.LevelDebug) { // no arguments built per renewal otherwise
		l.c.opts.Logger.Debug("dlock: renewed", "key", l.keys.Lock, "fence", l.fence, "ttl", ttl)
	}
	return info, nil, nil
}

// renewHooks calls the hooks a renewal made outside the watchdog's batches
// owes (see renewed): the Lost hook first if it found the lease lost, then
// Renew with hctx. A renewal that did not find the loss is not reported
// once the lease has ended otherwise (a loss found meanwhile, whose Lost
// may have begun, or an Unlock that may have returned): see Hooks.Renew.
// Callers hold no lock.
func (l *lease) renewHooks(hctx context.Context, info RenewInfo, lost func()) {
	if lost != nil {
		lost()
	}
	if h := l.c.hooks().Renew; h != nil && (lost != nil || l.held()) {
		h(hctx, info)
	}
}

// held reports whether the lease is held now.
func (l *lease) held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == stateHeld
}

// errRetryAlt asks the caller of renewed to renew once more: the key held
// the value of an earlier renewal whose reply was lost, now current.
var errRetryAlt = errors.New("dlock: retry with the value of an unanswered renewal")

// swapAlt makes alt the current value, if there is one.
func (l *lease) swapAlt() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.alt == "" {
		return false
	}
	l.value, l.alt = l.alt, ""
	return true
}

// renewNow renews the lease once for ttl, by itself (not in a batch);
// hctx is the Lost hook's context. Callers hold opMu, and report what the
// hooks are owed (see renewed) once they have let go of it.
func (l *lease) renewNow(ctx, hctx context.Context, ttl time.Duration) (info RenewInfo, lost func(), err error) {
	// A refused renewal is retried within the lease's deadline, never
	// sent for a lease that has ended meanwhile.
	ctx = rexec.WithRefusalBound(ctx, l.Deadline())
	for {
		l.setRenewing()
		sent := time.Now()
		next, code, rerr := renewOnce(ctx, l.c.exec, l.proto, l.keys, l.token(), ttl)
		if info, lost, err = l.renewed(hctx, sent, ttl, next, code, rerr); err != errRetryAlt {
			return info, lost, err
		}
	}
}

func causeOf(code int64) error {
	switch code {
	case codeGone:
		return ErrExpired
	case codeWrongType:
		return oneline.Chain(ErrTaken, ErrWrongType)
	default:
		return ErrTaken
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
func (l *lease) lose(ctx context.Context, cause error) (lost func(), err error) {
	return l.end(ctx, cause, false)
}

// loseEnding is lose for a lease whose release began (see endForRelease)
// and found, or could not undo, a loss: the release's own reply that the
// key was no longer ours, or Close giving up on it. A lease whose release
// was not confirmed yet ends lost instead of released.
func (l *lease) loseEnding(ctx context.Context, cause error) (lost func(), err error) {
	return l.end(ctx, cause, true)
}

// end is lose, and loseEnding if ending.
func (l *lease) end(ctx context.Context, cause error, ending bool) (lost func(), err error) {
	l.mu.Lock()
	held := l.state == stateHeld
	if !held && !(ending && l.ending) {
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

	l.c.wd.remove(l)
	if held {
		l.c.stats.held.Add(-1) // an ending lease was counted out when its release began
	}
	l.c.stats.lost.Add(1)
	if cause != errs.ErrLeftByClose { // Close logs what it leaves, once
		l.c.opts.Logger.Warn("dlock: lock lost", "key", l.keys.Lock, "fence", l.fence,
			"token", shortToken(value), "cause", cause)
	}
	info := LostInfo{Key: l.keys.Lock, Fence: l.fence, Held: time.Since(l.acquiredAt), Cause: cause}
	return func() { l.reportLoss(ctx, info) }, err
}

// reportLoss calls the Lost hook (Done has closed already, see lose).
func (l *lease) reportLoss(ctx context.Context, info LostInfo) {
	if h := l.c.hooks().Lost; h != nil {
		h(ctx, info)
	}
}

// extend renews the lease once, now, for ttl.
func (l *lease) extend(ctx context.Context, ttl time.Duration) error {
	if ctx == nil {
		return ErrNilContext
	}
	if !l.c.opts.ttlWorks(ttl, l.renew) {
		return l.c.opts.ttlError(ttl, l.renew)
	}
	l.opMu.Lock()
	if lost, err := l.errNow(); err != nil {
		l.opMu.Unlock()
		if lost != nil {
			lost()
		}
		return err
	}
	info, lost, err := l.renewNow(ctx, ctx, ttl)
	l.opMu.Unlock()
	l.renewHooks(ctx, info, lost)
	return err
}

// release deletes the lease's key if it still holds our value. It is
// idempotent, and safe to retry after a Redis error.
func (l *lease) release(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	start := time.Now()
	// Past its deadline already, the lease was lost before the caller let
	// go, even if the deadline timer has not run yet (a paused or starved
	// process): the release then reports that loss, not a release.
	late, _ := l.errNow()
	l.c.wd.remove(l) // no renewals once the caller wants out
	l.endForRelease()
	lost, report, err := l.releaseRetry(ctx, start)
	// The hooks run with no lock held (they may call back into the
	// Client): a loss this call found is reported by Lost first.
	if late != nil {
		late()
	}
	if lost != nil {
		lost()
	}
	if report {
		l.releaseHook(ctx, start, err)
	}
	return err
}

// releaseRetry runs releaseLocked, under opMu, until it answers: a
// release that fails on a connection error or a refusal (a master killed,
// a failover under way: see retryableRelease) is sent again, backing off
// from 10ms to 500ms, while ctx lasts and for at most ReleaseTimeout from
// start, so that the key is freed on the promoted replica instead of
// staying held by nobody for its TTL. Sending it again is safe: the
// release is token-checked, and a run of it whose reply was lost leaves a
// tombstone a second run answers by (see releaseLocked). It stops once
// the lease's deadline passed (the key expires by then): the last error
// stands.
func (l *lease) releaseRetry(ctx context.Context, start time.Time) (lost func(), report bool, err error) {
	back := 10 * time.Millisecond
	until := start.Add(l.c.opts.ReleaseTimeout)
	for {
		l.opMu.Lock()
		lo, rep, e := l.releaseLocked(ctx)
		l.opMu.Unlock()
		if !rep && err != nil {
			return lost, report, err // the deadline passed meanwhile: nothing more to send
		}
		lost, report, err = lo, report || rep, e
		if lost != nil || !retryableRelease(ctx, err) {
			return lost, report, err
		}
		wait := min(back, time.Until(until))
		if wait <= 0 {
			return lost, report, err
		}
		if cc, ok := l.c.rdb.(*redis.ClusterClient); ok {
			cc.ReloadState(ctx) // the slot's new master, once failed over (go-redis coalesces these)
		}
		l.c.opts.Logger.Debug("dlock: release failed; retrying", "key", l.keys.Lock, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return lost, report, err
		}
		back = min(2*back, 500*time.Millisecond)
	}
}

// retryableRelease reports whether a release that failed with err is
// worth sending again within ctx: a connection error (a master killed or
// unreachable, a reply that timed out) or a refusal by a node that is not
// the key's master, or not ready, for now (CLUSTERDOWN, TRYAGAIN,
// LOADING, READONLY, MASTERDOWN, MOVED, ASK, BUSY). Not an error the
// script raised, an ACL refusal, a closed go-redis client, or ctx's end.
func retryableRelease(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || errors.Is(err, redis.ErrClosed) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errs.Permission(err) != nil {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return true // no reply: a connection error
	}
	code, _, _ := strings.Cut(re.Error(), " ")
	switch code {
	case "CLUSTERDOWN", "TRYAGAIN", "LOADING", "READONLY", "MASTERDOWN", "MOVED", "ASK", "BUSY":
		return true
	}
	return false
}

// releaseLocked is release under opMu. It returns the release's error,
// the report of a loss it found (see lose), and whether the Release hook
// reports the call.
func (l *lease) releaseLocked(ctx context.Context) (lost func(), report bool, err error) {
	l.mu.Lock()
	state, lerr, tried, triedAt, value, ending, unsent := l.state, l.err, l.releaseTried, l.releaseSent, l.value, l.ending, l.unsent
	l.mu.Unlock()
	switch {
	case state == stateReleased && !ending && !unsent:
		return nil, false, nil // confirmed, or its deadline passed after a release was sent
	case state == stateLost:
		// A lease lost to an unreachable Redis may still be ours there (a
		// renewal could have landed without its reply), and a multi-key
		// lock that lost one key still holds the others: delete what is
		// ours (the release is token-checked).
		if errors.Is(lerr, ErrUnreachable) || l.multi != nil && len(l.multi.keys) > 1 {
			_, _ = l.releaseOnce(ctx, value)
		}
		report = !l.lossUnlocked
		l.lossUnlocked = true
		return nil, report, lerr
	}

	probe.Point(probe.BeforeRelease, l.keys.Lock)
	sent := time.Now()
	code, err := l.releaseOnce(ctx, value)
	if err == nil && code == codeOther && l.swapAlt() {
		code, err = l.releaseOnce(ctx, l.token())
	}
	if err == nil || ambiguous(err) {
		l.mu.Lock()
		l.unsent = false // it ran, or may have
		l.mu.Unlock()
	}
	switch {
	case err != nil:
		if ambiguous(err) {
			l.mu.Lock()
			if !l.releaseTried {
				l.releaseTried, l.releaseSent = true, sent
			}
			l.mu.Unlock()
		}
		err = errs.Unavailable(err)
	case code == codeOK, tried && !l.resendTold(code, triedAt):
		// tried: an earlier release may have run without its reply; if it
		// did, the key is gone, or handed to a waiter (or taken since):
		// whatever this retry finds, the release happened, not a loss.
		l.confirmRelease()
	default:
		// The key was not ours when the release landed: lost before it
		// (Lost first, then Release with the loss). Unless the deadline
		// passed while the release was in flight: the key was ours until
		// then, and the caller had let go before, so it is no loss.
		lost, err = l.loseEnding(ctx, causeOf(code))
		if lost == nil && errors.Is(err, ErrReleased) {
			err = nil
		} else {
			l.lossUnlocked = true
		}
	}
	if l.c.opts.Logger.Enabled(context.Background(), slog.LevelDebug) {
		l.c.opts.Logger.Debug("dlock: released", "key", l.keys.Lock, "fence", l.fence, "err", err)
	}
	return lost, true, err
}

// resendTellingRelease is implemented by the protocols whose release
// script tells a second run of a release that ran already (its reply was
// lost, and the caller retried) from a release that found the hold gone:
// the first run leaves a tombstone of the token (q_released in
// internal/lualib/queue.lua), and a run that finds the hold gone but the
// tombstone there answers codeOK. Their codeGone or codeOther is then a
// loss even on a retry: the hold was gone before any release of it ran
// (taken by an operator's ForceRelease, which leaves no tombstone, or
// expired and taken since). multi_release.lua tells key by key: a key the
// first run found not ours keeps another tombstone (q_mark_lost), and the
// second run's verdict on it stands.
type resendTellingRelease interface {
	releaseTellsResend()
}

// releaseTombstoneLife is how long a release's tombstone answers a second
// run: Q_DEAD_MS (internal/lualib/queue.lua), less a margin for the
// clocks. A retry later than that cannot tell, and is taken as released.
const releaseTombstoneLife = 9 * time.Second

// resendTold reports whether code, the reply of a retried release whose
// first send (at first) may have run without its reply, is the script's
// own verdict: a loss, not the trace of that first run (see
// resendTellingRelease).
func (l *lease) resendTold(code int64, first time.Time) bool {
	_, tells := l.proto.(resendTellingRelease)
	return tells && (code == codeGone || code == codeOther) && time.Since(first) < releaseTombstoneLife
}

// releaseOnce is releaseOnce for the lease: a script protocol's release
// sends the call releaseCall returns.
func (l *lease) releaseOnce(ctx context.Context, value string) (int64, error) {
	_, direct := l.proto.(protocol.DirectProtocol)
	if _, token := l.proto.(tokenLock); direct || token {
		return releaseOnce(ctx, l.c.exec, l.proto, l.keys, value)
	}
	if code, err, ok := sentRelease(ctx, value); ok { // Close sent it in a pipeline
		return code, err
	}
	return l.c.exec.Run(ctx, l.releaseCall(value)).Int64()
}

// releaseCall returns the call that releases value: the one built for
// value before, if any. A release whose reply was lost may have run, and
// is retried (a repeated Unlock, Close) by sending the same call, not a
// new one: a protocol whose stored value is not unique to one holder (the
// legacy timestamps) puts an id of the release in the call, so that a
// release that ran once never runs again, on whoever holds the same value
// since.
func (l *lease) releaseCall(value string) protocol.Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.relCall.Script == nil || l.relValue != value {
		l.relValue, l.relCall = value, l.proto.Release(l.keys, value)
	}
	return l.relCall
}

// leftByClose ends a lease still held after the release an acquiring call
// made because Close ran meanwhile failed with err: Close did not see it
// (it started after Close's snapshot), nothing renews it, and it stays in
// Redis until its TTL. It is not counted as held any more, nor as lost:
// the call returns ErrClosed, so the lock was never handed out, and no
// hook reports it. A WARN says what is left, as Close's own does.
func (l *lease) leftByClose(err error) {
	l.mu.Lock()
	if !l.ending { // released (confirmed), or not held any more
		l.mu.Unlock()
		return
	}
	l.state, l.ending = stateLost, false
	l.err = errs.Lost(l.keys.Lock, errs.ErrLeftByClose)
	l.timer.Stop()
	value := l.value
	l.mu.Unlock()
	l.c.stats.releasesLeft.Add(1)
	l.c.wd.remove(l)
	l.c.opts.Logger.Warn("dlock: Close left a lock acquired while it ran to expire by its TTL",
		"key", l.keys.Lock, "fence", l.fence, "token", shortToken(value), "err", err)
}

// endForRelease ends a held lease as released before its release is
// sent: Done closes and Err reports ErrReleased at once, so work bound to
// the lock (Do's context, an elected leader's) stops before Redis can
// hand the key to another owner. The deadline timer stays armed until a
// reply confirms the release (confirmRelease): Close sends it again if
// the release fails, and the deadline ends the wait for a reply.
func (l *lease) endForRelease() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld {
		return
	}
	l.state, l.err, l.ending, l.unsent = stateReleased, ErrReleased, true, true
	l.c.stats.held.Add(-1)
	if l.done != nil {
		close(l.done)
	}
}

// confirmRelease records the reply of a release that ran (see
// endForRelease).
func (l *lease) confirmRelease() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ending {
		return
	}
	l.ending = false
	l.timer.Stop()
	l.c.stats.released.Add(1)
}

// closedChan is the Done channel of a lease that ended before anyone asked.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// doneChan returns the lease's done channel, making it on first use.
func (l *lease) doneChan() <-chan struct{} {
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

func (l *lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Err is exact: past the deadline it reports the loss even if the
// deadline timer has not run yet (on a starved machine it runs late).
func (l *lease) Err() error {
	lost, err := l.errNow()
	if lost != nil {
		lost()
	}
	return err
}

// errNow is Err for callers that hold a lock: the report of a loss it
// finds is theirs to run once they hold none (see lose).
func (l *lease) errNow() (lost func(), err error) {
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
