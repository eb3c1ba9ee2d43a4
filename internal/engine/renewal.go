// renewal.go owns one lease's renewal: building its call (or its part
// of a bulk renewal), applying its reply, a renewal sent by itself, and
// Extend.

package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
)

// renewal builds the lease's renewal for ttl with token, the value the
// key holds: as a bulk renewal if extend_many can serve it (bulk), else as
// its protocol's call; next is what the key holds once renewed. Callers
// hold opMu.
func (l *Lease) renewal(ttl time.Duration, token string) (c protocol.Call, br bulkRenewal, next string, bulk bool) {
	if b, ok := l.bulkRenewal(ttl, token); ok {
		if l.leanLock == nil {
			l.leanLock = l.keys.Lock
		}
		if s, ok := l.leanToken.(string); !ok || s != token {
			l.leanToken = token
		}
		b.lockArg, b.tokenArg = l.leanLock, l.leanToken
		return c, b, token, true
	}
	c, next = l.proto.Renew(l.keys, token, ttl)
	return c, bulkRenewal{}, next, false
}

// bulkRenewal returns the renewal of token for ttl as its part of an
// extend_many call, if the lease's protocol renews in bulk (see
// BulkRenewer).
func (l *Lease) bulkRenewal(ttl time.Duration, token string) (bulkRenewal, bool) {
	if _, ok := l.proto.(BulkRenewer); !ok || l.direct() {
		return bulkRenewal{}, false
	}
	return bulkRenewal{lock: l.keys.Lock, fence: l.keys.Fence, token: token,
		ttl: ttl.Milliseconds(), fttl: FenceTTL(ttl).Milliseconds()}, true
}

// setRenewing marks a renewal in flight until renewed applies its reply.
func (l *Lease) setRenewing() {
	l.mu.Lock()
	l.renewing = true
	l.mu.Unlock()
}

// direct reports whether the lease's protocol renews by itself.
func (l *Lease) direct() bool {
	_, ok := l.proto.(Direct)
	return ok
}

// renewed applies the reply of a renewal sent at sent, which stores next
// in the key if it succeeds. Callers hold opMu. It returns nil, the loss
// error, or the Redis error (the lease stays held until its deadline),
// with what the hooks are owed, which the caller reports once it holds no
// lock: info for the Renew hook and, if the renewal found the lease lost,
// the loss's report (see Lose). ctx is the Lost hook's.
func (l *Lease) renewed(ctx context.Context, sent time.Time, ttl time.Duration, next string, code int64, err error) (info RenewInfo, lost func(), rerr error) {
	info = RenewInfo{Key: l.keys.Lock, Fence: l.fence}
	l.mu.Lock()
	l.renewing = false
	l.mu.Unlock()
	if err != nil {
		info.Err = err
		l.e.Stats.RenewalFailures.Add(1)
		l.mu.Lock()
		if l.state == stateHeld {
			l.renewErr = err
			if next != l.value && Ambiguous(err) {
				l.alt = next
			}
			// The renewal may have run, or may still land (a lost reply, a
			// command delayed, a WAIT that timed out after the PEXPIRE):
			// the deadline stands even so, as no renewal moves the key's
			// expiry earlier (see protocol.Protocol's Renew).
		}
		l.mu.Unlock()
		l.e.log.Debug("dlock: renewal failed", "key", l.keys.Lock, "err", err)
		return info, nil, errs.Unavailable(err)
	}
	if code == codeOther && l.swapAlt() {
		return info, nil, errRetryAlt
	}
	if (code == codeGone || code == codeOther) && l.e.Closed() {
		// Close releases every lock it holds without waiting for a
		// renewal in flight (an Extend): the key gone, or handed to a
		// waiter, is its release, most likely. Not a loss: Close applies
		// its release's reply once the caller lets go of opMu (released,
		// or lost if the key was gone before), or ends the lock itself.
		info.Err = errs.ErrClosed
		return info, nil, errs.ErrClosed
	}
	if code != codeOK {
		lost, err = l.Lose(ctx, causeOf(code))
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
	if time.Now().After(sent.Add(ttl - l.e.timing.Drift(ttl))) {
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
		l.e.wd.renewEarlier(l, l.nextRenew, l.e.timing.RenewEvery(ttl))
	}
	l.e.Stats.Renewals.Add(1)
	if l.e.log.Enabled(context.Background(), slog.LevelDebug) { // no arguments built per renewal otherwise
		l.e.log.Debug("dlock: renewed", "key", l.keys.Lock, "fence", l.fence, "ttl", ttl)
	}
	return info, nil, nil
}

// renewHooks calls the hooks a renewal made outside the watchdog's batches
// owes (see renewed): the Lost hook first if it found the lease lost, then
// Renew with hctx. A renewal that did not find the loss is not reported
// once the lease has ended otherwise (a loss found meanwhile, whose Lost
// may have begun, or an Unlock that may have returned): see Hooks.Renew.
// Callers hold no lock.
func (l *Lease) renewHooks(hctx context.Context, info RenewInfo, lost func()) {
	if lost != nil {
		lost()
	}
	if h := l.e.hooksNow().Renew; h != nil && (lost != nil || l.held()) {
		h(hctx, info)
	}
}

// errRetryAlt asks the caller of renewed to renew once more: the key held
// the value of an earlier renewal whose reply was lost, now current.
var errRetryAlt = errors.New("dlock: retry with the value of an unanswered renewal")

// swapAlt makes alt the current value, if there is one.
func (l *Lease) swapAlt() bool {
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
func (l *Lease) renewNow(ctx, hctx context.Context, ttl time.Duration) (info RenewInfo, lost func(), err error) {
	// A refused renewal is retried within the lease's deadline, never
	// sent for a lease that has ended meanwhile.
	ctx = rexec.WithRefusalBound(ctx, l.Deadline())
	for {
		l.setRenewing()
		sent := time.Now()
		next, code, rerr := renewOnce(ctx, l.e.exec, l.proto, l.keys, l.Token(), ttl)
		if info, lost, err = l.renewed(hctx, sent, ttl, next, code, rerr); err != errRetryAlt {
			return info, lost, err
		}
	}
}

// Extend renews the lease once, now, for ttl.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ctx == nil {
		return errs.ErrNilContext
	}
	if !l.e.timing.TTLWorks(ttl, l.renew) {
		return l.e.timing.TTLError(ttl, l.renew)
	}
	l.opMu.Lock()
	if lost, err := l.ErrNow(); err != nil {
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
