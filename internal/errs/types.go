package errs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/oneline"
	"github.com/redis/go-redis/v9"
)

// NotAcquiredError is returned by TryLock when the key is held by another
// owner. It matches ErrNotAcquired.
type NotAcquiredError struct {
	Key string
	// TTL is the holder's remaining time to live as the protocol reports
	// it: for the token lock, Redis's PTTL; -1 means the key has no expiry
	// (a foreign client set it without one); 0 means the key is free but
	// waiters are queued ahead (FIFO: newcomers do not barge).
	TTL time.Duration
}

func (e *NotAcquiredError) Error() string {
	if e.TTL < 0 {
		return fmt.Sprintf("%v: key %q (no expiry set by its holder)", ErrNotAcquired, e.Key)
	}
	return fmt.Sprintf("%v: key %q, expires in %v", ErrNotAcquired, e.Key, e.TTL)
}

func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// Lost returns the error of a lost lock: it matches ErrLost, ErrNotHeld
// and cause.
func Lost(key string, cause error) error { return &lostError{key: key, cause: cause} }

// lostError reports a lost lock: it matches ErrLost, ErrNotHeld and its cause.
type lostError struct {
	key   string
	cause error
}

func (e *lostError) Error() string {
	return fmt.Sprintf("dlock: lock %q lost: %s", e.key, strings.TrimPrefix(oneline.Msg(e.cause), "dlock: "))
}
func (e *lostError) Is(target error) bool { return target == ErrLost || target == ErrNotHeld }
func (e *lostError) Unwrap() error        { return e.cause }

// Unavailable wraps an error of the Redis driver: ErrNoPermission if Redis
// refused it by ACL, else ErrUnavailable.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	if pe := Permission(err); pe != nil {
		return pe
	}
	if errors.Is(err, ErrClosed) {
		// Close ended the retries of a call Redis refused (see
		// rexec.Exec.EndRefusalsOn): the call did not run.
		return err
	}
	if isConnTimeout(err) {
		return &noReplyError{err: err}
	}
	return oneline.Chain(ErrUnavailable, err)
}

// isConnTimeout reports whether err is, or wraps, a timeout of the
// driver's connection.
func isConnTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// NoReply is ErrNoReply for err, the driver's error, after (if known,
// else 0) how long the call had waited for its reply.
func NoReply(after time.Duration, err error) error { return &noReplyError{after: after, err: err} }

// noReplyError is ErrNoReply: err is the driver's error, after (if
// known) how long the call had waited for its reply.
type noReplyError struct {
	after time.Duration
	err   error
}

func (e *noReplyError) Error() string {
	msg := ErrUnavailable.Error() + ": "
	if e.after > 0 {
		msg += fmt.Sprintf("no reply within %v: ", e.after.Round(time.Millisecond))
	}
	return msg + oneline.Msg(e.err)
}

func (e *noReplyError) Is(target error) bool {
	return target == ErrNoReply || target == ErrUnavailable
}

func (e *noReplyError) Unwrap() error { return e.err }

// CtxDone is ErrContextDone for ctx, which has ended.
func CtxDone(ctx interface{ Err() error }) error {
	return &ctxDoneError{ctxErr: ctx.Err()}
}

// CtxDoneAfter is ErrContextDone for ctx, which ended after the Redis
// error cause (nil: none) while the call waited.
func CtxDoneAfter(ctx interface{ Err() error }, cause error) error {
	return &ctxDoneError{ctxErr: ctx.Err(), cause: cause}
}

// ctxDoneError is ErrContextDone: it matches ErrContextDone, the
// context's error and, if not nil, the last Redis error of the call.
type ctxDoneError struct {
	ctxErr, cause error
}

func (e *ctxDoneError) Error() string {
	msg := ErrContextDone.Error()
	if e.ctxErr != nil {
		msg += ": " + oneline.Msg(e.ctxErr)
	}
	if e.cause != nil {
		msg += "; the last Redis error while waiting: " + strings.TrimPrefix(oneline.Msg(e.cause), "dlock: ")
	}
	return msg
}

func (e *ctxDoneError) Unwrap() []error {
	errs := []error{ErrContextDone}
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}

// WithRedisCause returns err, an ErrContextDone, with cause as its Redis
// cause if it has none.
func WithRedisCause(err, cause error) error {
	var cd *ctxDoneError
	if cause == nil || !errors.As(err, &cd) || cd.cause != nil {
		return err
	}
	return &ctxDoneError{ctxErr: cd.ctxErr, cause: cause}
}

// TTLError is an ErrInvalidTTL naming the TTL given and the range that
// works (Min 0: none does, with these options).
type TTLError struct {
	TTL, Min, Max time.Duration
	Renew         bool
}

func (e *TTLError) Error() string {
	if e.Min == 0 {
		return fmt.Sprintf("%v: %v: no TTL works with these DriftFactor, MinDrift and RenewInterval options", ErrInvalidTTL, e.TTL)
	}
	why := "1ms to MaxTTL"
	if e.Min > time.Millisecond {
		why = "the drift allowance (TTL*DriftFactor + MinDrift) must leave a validity"
		if e.Renew {
			why += " longer than the renewal interval"
		}
	}
	return fmt.Sprintf("%v: %v is outside %v..%v (%s)", ErrInvalidTTL, e.TTL, e.Min.Round(time.Microsecond), e.Max, why)
}

func (e *TTLError) Is(target error) bool {
	return target == ErrInvalidTTL || target == ErrInvalidArgument
}

// CloseError is Client.Close's error when it could not release every lock
// the Client held (Redis unreachable or too slow within
// Options.ReleaseTimeout): Left of Total locks stay held in Redis until
// their TTL runs out. It matches ErrUnavailable, and Err holds the first
// few release errors.
type CloseError struct {
	Left, Total int
	Err         error
}

func (e *CloseError) Error() string {
	return fmt.Sprintf("dlock: Close released %d of %d locks; %d are left to expire by their TTL: %s",
		e.Total-e.Left, e.Total, e.Left, oneline.Msg(e.Err))
}

// Is makes a CloseError match ErrUnavailable.
func (e *CloseError) Is(target error) bool { return target == ErrUnavailable }

func (e *CloseError) Unwrap() error { return e.Err }

// PermissionError is ErrNoPermission: Redis refused a command, key or
// channel to the user the Client connects as (its ACL).
type PermissionError struct {
	// What was refused: "command", "key" or "channel" (Redis's reply
	// names no more; "access" if it names none of them).
	What string
	// Err is Redis's error reply.
	Err error
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("%v: the Redis user may not use a %s dlock needs (%s): %s", ErrNoPermission, e.What, grantHint[e.What], oneline.Msg(e.Err))
}

// Is makes a PermissionError match ErrNoPermission.
func (e *PermissionError) Is(target error) bool { return target == ErrNoPermission }

func (e *PermissionError) Unwrap() error { return e.Err }

// grantHint says what the ACL must grant, per kind of refusal.
var grantHint = map[string]string{
	"command": "grant +@all, or +@all -@dangerous",
	"key":     "grant ~<your keys> ~<Prefix>:*",
	"channel": "grant &<Prefix>:*, or set Options.NoPubSub",
	"access":  "see the ACL rights in docs/guarantees.md",
}

// Permission returns err as a *PermissionError if it is, or wraps, an
// ACL refusal by Redis: a NOPERM error reply, or the error of a command
// the ACL refused inside a script ("ERR The user executing the script
// can't ..." on Redis 7.0, "ERR ACL failure in script: ..." later).
// Otherwise nil.
func Permission(err error) *PermissionError {
	var pe *PermissionError
	if errors.As(err, &pe) {
		return pe
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return nil
	}
	msg := re.Error()
	if !strings.HasPrefix(msg, "NOPERM") && !strings.Contains(msg, "ACL failure in script") &&
		!strings.Contains(msg, "The user executing the script can't") {
		return nil
	}
	return &PermissionError{What: refused(msg), Err: err}
}

// refused says what an ACL error reply refused.
func refused(msg string) string {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "channel"):
		return "channel"
	case strings.Contains(m, " key"):
		return "key"
	case strings.Contains(m, "command"):
		return "command"
	}
	return "access"
}

// RefusedDone is the error of an acquiring call whose ctx ended (ctxErr)
// while Redis refused its acquire (refusal): it matches ErrContextDone
// and ctx's error, as any acquire the ctx ended, and ErrUnavailable, and
// it names the last refusal.
func RefusedDone(ctxErr, refusal error) error {
	return &refusedDoneError{ctxErr: ctxErr, refusal: refusal}
}

type refusedDoneError struct {
	ctxErr, refusal error
}

func (e *refusedDoneError) Error() string {
	return fmt.Sprintf("%v: %v; Redis refused the acquire until then: %v", ErrContextDone, e.ctxErr, oneline.Msg(e.refusal))
}
func (e *refusedDoneError) Is(target error) bool {
	return target == ErrContextDone || target == ErrUnavailable
}
func (e *refusedDoneError) Unwrap() []error { return []error{e.ctxErr, e.refusal} }

// Close reports the locks Close left to expire: left of total, with the
// first few release errors (none: the release timeout ran out).
func Close(left, total int, errs []error) error {
	if left == 0 {
		return nil
	}
	if len(errs) == 0 {
		errs = []error{Unavailable(context.DeadlineExceeded)}
	}
	return &CloseError{Left: left, Total: total, Err: oneline.Join(errs...)}
}
