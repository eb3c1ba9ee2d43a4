package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
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
func withdraw(ctx context.Context, x *rexec.Exec, p protocol.Protocol, k protocol.Keys, value string) error {
	if l, ok := p.(leaver); ok {
		return x.Run(ctx, l.Leave(k, value)).Err()
	}
	if d, ok := p.(protocol.DirectProtocol); ok {
		_, err := d.ReleaseDirect(ctx, k, value)
		return err
	}
	return x.Run(ctx, p.Release(k, value)).Err()
}

// renewOnce renews value on k for ttl, by script or directly.
func renewOnce(ctx context.Context, x *rexec.Exec, p protocol.Protocol, k protocol.Keys, value string, ttl time.Duration) (next string, code int64, err error) {
	if d, ok := p.(protocol.DirectProtocol); ok {
		return d.RenewDirect(ctx, k, value, ttl)
	}
	c, next := p.Renew(k, value, ttl)
	code, err = x.Run(ctx, c).Int64()
	return next, code, err
}

// releaseOnce releases value on k, by script or directly.
func releaseOnce(ctx context.Context, x *rexec.Exec, p protocol.Protocol, k protocol.Keys, value string) (int64, error) {
	if d, ok := p.(protocol.DirectProtocol); ok {
		return d.ReleaseDirect(ctx, k, value)
	}
	if code, err, ok := sentRelease(ctx, value); ok { // Close sent it in a pipeline
		return code, err
	}
	if t, ok := p.(tokenLock); ok {
		return t.release(ctx, x, k, value).Int64()
	}
	return x.Run(ctx, p.Release(k, value)).Int64()
}
