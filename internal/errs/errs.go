// Package errs owns the error values of package dlock that the engine
// returns: the sentinels every error matches with errors.Is, and the
// error types that carry details (a loss, a context that ended, a Redis
// failure, an ACL refusal, a bad TTL, what Close left). Package dlock
// re-exports the sentinels and the public types under the same names and
// documents them; this package only defines them, so the engine
// (internal/engine) and package dlock return the very same values.
package errs

import (
	"errors"
	"fmt"
)

// The sentinels: see package dlock's errors.go for what each means.
var (
	ErrNotAcquired     = errors.New("dlock: not acquired: held by another owner")
	ErrNotHeld         = errors.New("dlock: lock not held")
	ErrLost            = errors.New("dlock: lock lost")
	ErrExpired         = errors.New("dlock: lock key deleted, or its TTL ran out")
	ErrTaken           = errors.New("dlock: lock taken by another owner")
	ErrUnreachable     = errors.New("dlock: redis unreachable until the lock's deadline")
	ErrContextDone     = errors.New("dlock: context done before the lock was acquired")
	ErrUnavailable     = errors.New("dlock: redis unavailable")
	ErrNoReply         = errors.New("dlock: no reply from redis")
	ErrNoPermission    = errors.New("dlock: no permission")
	ErrWrongType       = errors.New("dlock: key holds a non-string value (not a lock)")
	ErrReplicaAck      = errors.New("dlock: not enough replicas acknowledged the lock")
	ErrClosed          = errors.New("dlock: client closed")
	ErrReleased        = fmt.Errorf("%w: released", ErrNotHeld)
	ErrInvalidArgument = errors.New("dlock: invalid argument")
	ErrNilContext      = Arg("nil context")
	ErrInvalidTTL      = Arg("invalid TTL")
)

// ErrLeftByClose is the loss cause of a lock Close could not release: the
// Client renews it no more, and Redis keeps it until its TTL.
var ErrLeftByClose = fmt.Errorf("%w before it could release the lock (Redis keeps it until its TTL)", ErrClosed)

// argError is a bad-input error: distinct per kind, and all match
// ErrInvalidArgument.
type argError string

// Arg returns a bad-input error with msg: it matches ErrInvalidArgument.
func Arg(msg string) error { return argError(msg) }

func (e argError) Error() string        { return "dlock: invalid argument: " + string(e) }
func (e argError) Is(target error) bool { return target == ErrInvalidArgument }
