package dlock

import (
	"context"
	"strings"
	"time"

	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// How the engine calls a protocol (package protocol): the option that
// selects one, and the withdrawal, renewal and release of one value,
// by script or directly.

// WithProtocol makes the call use p instead of the token lock: another
// lock format on the same engine (package legacy's, package redlock's, or
// your own; see package protocol). It applies to exclusive locks only
// (Client.Lock, TryLock, Do): RWLock readers, Reentrant and Semaphore
// refuse it (ErrInvalidOpts).
func WithProtocol(p protocol.Protocol) LockOption {
	return func(c *lockConfig) { c.proto, c.kinds = p, c.kinds|kindProtocol }
}

// leaver is implemented by protocols whose waiters queue in Redis.
type leaver interface {
	Leave(k protocol.Keys, value string) protocol.Call
}

// withdraw removes value from k, held or queued: a leaving waiter, or the
// clean-up after an acquire whose reply was lost.
func withdraw(ctx context.Context, rdb redis.UniversalClient, p protocol.Protocol, k protocol.Keys, value string) error {
	if l, ok := p.(leaver); ok {
		return runScript(ctx, rdb, l.Leave(k, value)).Err()
	}
	if d, ok := p.(protocol.DirectProtocol); ok {
		_, err := d.ReleaseDirect(ctx, k, value)
		return err
	}
	return runScript(ctx, rdb, p.Release(k, value)).Err()
}

// renewOnce renews value on k for ttl, by script or directly.
func renewOnce(ctx context.Context, rdb redis.UniversalClient, p protocol.Protocol, k protocol.Keys, value string, ttl time.Duration) (next string, code int64, err error) {
	if d, ok := p.(protocol.DirectProtocol); ok {
		return d.RenewDirect(ctx, k, value, ttl)
	}
	c, next := p.Renew(k, value, ttl)
	code, err = runScript(ctx, rdb, c).Int64()
	return next, code, err
}

// releaseOnce releases value on k, by script or directly.
func releaseOnce(ctx context.Context, rdb redis.UniversalClient, p protocol.Protocol, k protocol.Keys, value string) (int64, error) {
	if d, ok := p.(protocol.DirectProtocol); ok {
		return d.ReleaseDirect(ctx, k, value)
	}
	if code, err, ok := sentRelease(ctx, value); ok { // Close sent it in a pipeline
		return code, err
	}
	if t, ok := p.(tokenLock); ok {
		return t.release(ctx, rdb, k, value).Int64()
	}
	return runScript(ctx, rdb, p.Release(k, value)).Int64()
}

// scriptRaised reports whether the error reply re was raised by a script
// while it ran (a failing redis.call, a Lua error, SCRIPT KILL), rather
// than refused before it started (NOSCRIPT, BUSY, MOVED, LOADING...).
// Redis does not roll back a script's writes when it fails, so such an
// error is ambiguous, never definite: the scripts check every type before
// their first write, but one raised after a write would otherwise leave
// a key written that nobody withdraws. Redis 7 ends these replies with
// "script: <sha>, on @user_script:<line>."; Redis 6 starts them with
// "ERR Error running script".
func scriptRaised(re redis.Error) bool {
	msg := re.Error()
	return strings.Contains(msg, "@user_script:") || strings.Contains(msg, "Error running script") ||
		strings.Contains(msg, "user_script:")
}
