// release.go owns one lease's release: ending it before the release is
// sent, the release and its retry, the reply that confirms it or finds
// the loss, and a lease Close left to expire.

package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Release deletes the lease's key if it still holds our value. It is
// idempotent, and safe to retry after a Redis error.
func (l *Lease) Release(ctx context.Context) error {
	if ctx == nil {
		return errs.ErrNilContext
	}
	start := time.Now()
	// Past its deadline already, the lease was lost before the caller let
	// go, even if the deadline timer has not run yet (a paused or starved
	// process): the release then reports that loss, not a release.
	late, _ := l.ErrNow()
	l.e.wd.remove(l) // no renewals once the caller wants out
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
func (l *Lease) releaseRetry(ctx context.Context, start time.Time) (lost func(), report bool, err error) {
	back := 10 * time.Millisecond
	until := start.Add(l.e.releaseTimeout)
	for {
		l.opMu.Lock()
		lo, rep, e := l.releaseLocked(ctx)
		l.opMu.Unlock()
		if !rep && err != nil {
			// Nothing sent this time. Another call (a concurrent Unlock,
			// Close) had its release confirmed while this one backed off:
			// released is this call's outcome too. Else (the deadline
			// passed meanwhile, or the lease ended lost) nothing more to
			// send, and this call's last error stands.
			if l.settled() {
				return nil, report, e
			}
			return lost, report, err
		}
		lost, report, err = lo, report || rep, e
		if lost != nil || !retryableRelease(ctx, err) {
			return lost, report, err
		}
		wait := min(back, time.Until(until))
		if wait <= 0 {
			return lost, report, err
		}
		if cc, ok := l.e.rdb.(*redis.ClusterClient); ok {
			cc.ReloadState(ctx) // the slot's new master, once failed over (go-redis coalesces these)
		}
		l.e.log.Debug("dlock: release failed; retrying", "key", l.keys.Lock, "err", err)
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
// the report of a loss it found (see Lose), and whether the Release hook
// reports the call.
func (l *Lease) releaseLocked(ctx context.Context) (lost func(), report bool, err error) {
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
		if errors.Is(lerr, errs.ErrUnreachable) || l.multi != nil && len(l.multi.Keys) > 1 {
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
		code, err = l.releaseOnce(ctx, l.Token())
	}
	if err == nil || Ambiguous(err) {
		l.mu.Lock()
		l.unsent = false // it ran, or may have
		l.mu.Unlock()
	}
	switch {
	case err != nil:
		if Ambiguous(err) {
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
		// then, and the caller had let go before, so it is no loss. A
		// hold the release answers codeStolen for was lost all the same:
		// an operator took it before the release ran, maybe long before
		// the deadline.
		lost, err = l.end(ctx, causeOf(code), true, code == codeStolen)
		if lost == nil && errors.Is(err, errs.ErrReleased) {
			err = nil
		} else {
			l.lossUnlocked = true
		}
	}
	if l.e.log.Enabled(context.Background(), slog.LevelDebug) {
		l.e.log.Debug("dlock: released", "key", l.keys.Lock, "fence", l.fence, "err", err)
	}
	return lost, true, err
}

// releaseTombstoneLife is how long a release's tombstone answers a second
// run: Q_DEAD_MS (internal/lualib/queue.lua), less a margin for the
// clocks. A retry later than that cannot tell, and is taken as released.
const releaseTombstoneLife = 9 * time.Second

// resendTold reports whether code, the reply of a retried release whose
// first send (at first) may have run without its reply, is the script's
// own verdict: a loss, not the trace of that first run (see
// ResendTeller).
func (l *Lease) resendTold(code int64, first time.Time) bool {
	if code == codeStolen {
		return true // the steal's mark: no run of this release found the hold
	}
	_, tells := l.proto.(ResendTeller)
	return tells && (code == codeGone || code == codeOther) && time.Since(first) < releaseTombstoneLife
}

// releaseOnce is releaseOnce for the lease: a script protocol's release
// sends the call releaseCall returns.
func (l *Lease) releaseOnce(ctx context.Context, value string) (int64, error) {
	_, direct := l.proto.(Direct)
	if _, raw := l.proto.(RawReleaser); raw && !direct && l.relArgsUsed.CompareAndSwap(false, true) {
		// The lease's first release command is built in the lease (see
		// ArgBuf); a later one, in storage of its own.
		l.relArgs.Keys, l.relArgs.Value = &l.keys, value
		return releaseOnceIn(ctx, l.e.exec, l.proto, l.keys, value, &l.relArgs)
	}
	if _, raw := l.proto.(RawReleaser); direct || raw {
		return ReleaseOnce(ctx, l.e.exec, l.proto, l.keys, value)
	}
	if code, err, ok := sentRelease(ctx, value); ok { // Close sent it in a pipeline
		return code, err
	}
	return l.e.exec.Run(ctx, l.releaseCall(value)).Int64()
}

// releaseCall returns the call that releases value: the one built for
// value before, if any. A release whose reply was lost may have run, and
// is retried (a repeated Unlock, Close) by sending the same call, not a
// new one: a protocol whose stored value is not unique to one holder (the
// legacy timestamps) puts an id of the release in the call, so that a
// release that ran once never runs again, on whoever holds the same value
// since.
func (l *Lease) releaseCall(value string) protocol.Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.relCall.Script == nil || l.relValue != value {
		l.relValue, l.relCall = value, l.proto.Release(l.keys, value)
	}
	return l.relCall
}

// LeftByClose ends a lease still held after the release an acquiring call
// made because Close ran meanwhile failed with err: Close did not see it
// (it started after Close's snapshot), nothing renews it, and it stays in
// Redis until its TTL. It is not counted as held any more, nor as lost:
// the call returns errs.ErrClosed, so the lock was never handed out, and no
// hook reports it. A WARN says what is left, as Close's own does.
func (l *Lease) LeftByClose(err error) {
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
	l.e.Stats.ReleasesLeft.Add(1)
	l.e.wd.remove(l)
	l.e.log.Warn("dlock: Close left a lock acquired while it ran to expire by its TTL",
		"key", l.keys.Lock, "fence", l.fence, "token", ShortToken(value), "err", err)
}

// endForRelease ends a held lease as released before its release is
// sent: Done closes and Err reports errs.ErrReleased at once, so work bound to
// the lock (Do's context, an elected leader's) stops before Redis can
// hand the key to another owner. The deadline timer stays armed until a
// reply confirms the release (confirmRelease): Close sends it again if
// the release fails, and the deadline ends the wait for a reply.
func (l *Lease) endForRelease() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld {
		return
	}
	l.state, l.err, l.ending, l.unsent = stateReleased, errs.ErrReleased, true, true
	l.e.Stats.Held.Add(-1)
	if l.done != nil {
		close(l.done)
	}
}

// confirmRelease records the reply of a release that ran (see
// endForRelease).
func (l *Lease) confirmRelease() {
	l.mu.Lock()
	if !l.ending {
		l.mu.Unlock()
		return
	}
	l.ending, l.confirmed = false, true
	l.timer.Stop()
	value := l.value
	l.mu.Unlock()
	l.e.Stats.Released.Add(1)
	l.e.resend.record(l, value) // sent again should the master change (resend.go)
}

// settled reports whether a reply confirmed the lease's release. A lease
// that ended lost does not count: a call that learnt nothing itself keeps
// its own last error then, never a nil that would say released.
func (l *Lease) settled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.confirmed
}
