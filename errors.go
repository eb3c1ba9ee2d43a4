package dlock

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/oneline"
	"github.com/redis/go-redis/v9"
)

// Every error the package returns matches one of these sentinels with
// errors.Is. Details are added by wrapping, never by new sentinel values.
var (
	// ErrNotAcquired: the lock is held by another owner. TryLock returns it
	// as a *NotAcquiredError, which carries the holder's remaining TTL.
	ErrNotAcquired = errors.New("dlock: not acquired: held by another owner")

	// ErrNotHeld: the operation needs a lock the caller holds, and it does
	// not (it was released, or it was lost). Every loss error matches it too.
	ErrNotHeld = errors.New("dlock: lock not held")

	// ErrLost: the lock was lost while held. Lock.Err, Unlock and Extend
	// return it joined with the cause: ErrExpired, ErrTaken or ErrUnreachable.
	ErrLost = errors.New("dlock: lock lost")

	// ErrExpired: the lock key vanished before it was renewed or released
	// (it was deleted, or its TTL ran out), or its validity ran out locally.
	ErrExpired = errors.New("dlock: lock key deleted, or its TTL ran out")

	// ErrTaken: the lock key now holds another owner's token.
	ErrTaken = errors.New("dlock: lock taken by another owner")

	// ErrUnreachable: Redis could not be reached to renew the lock before its
	// deadline, so the holder must assume it is gone.
	ErrUnreachable = errors.New("dlock: redis unreachable until the lock's deadline")

	// ErrContextDone: the context ended before the lock was acquired. It is
	// joined with ctx.Err(), so errors.Is(err, context.DeadlineExceeded) works.
	// If Redis failed or did not answer while the call waited (the last
	// attempt got an error, or was still without a reply when the context
	// ended), that Redis error is joined too: errors.Is(err, ErrUnavailable)
	// then tells "still held" from "Redis did not answer".
	ErrContextDone = errors.New("dlock: context done before the lock was acquired")

	// ErrUnavailable wraps an error from the Redis driver (network, timeout,
	// server error reply). errors.As reaches the driver's own error. A
	// Cluster node's refusal of a call it did not run (TRYAGAIN, ASK,
	// MOVED, CLUSTERDOWN, LOADING, MASTERDOWN) is retried until the ctx's
	// deadline first; the error then names the last refusal. Close ends
	// those retries: the call then returns ErrClosed, naming the refusal.
	ErrUnavailable = errors.New("dlock: redis unavailable")

	// ErrNoReply: Redis did not reply to a call in time (the driver's read
	// timeout passed, or the context ended while the call was in flight):
	// it may be paused, overloaded, or cut off. It comes with ErrUnavailable.
	// A waiting call whose context ends returns it joined to ErrContextDone
	// if its last attempt got no reply for at least 250 ms; its absence does
	// not prove Redis answered, since a waiting call may be asleep when
	// Redis stops, or have sent its last attempt a moment before the
	// deadline.
	ErrNoReply = errors.New("dlock: no reply from redis")

	// ErrNoPermission: the Redis user's ACL refused something dlock needs:
	// a command (EVAL and EVALSHA, or one a script runs), a key (the lock
	// key or one of its auxiliary keys under Options.Prefix), or a channel
	// (SUBSCRIBE to the Client's channels, which a waiting call needs unless
	// Options.NoPubSub is set). It is returned as a *PermissionError, which
	// names what was refused. It does not match ErrUnavailable: retrying does
	// not help until the ACL changes. A script refused before it ran wrote
	// nothing; dlock's scripts publish by a call whose refusal cannot end
	// them, so a refused publish loses only a wake-up.
	ErrNoPermission = errors.New("dlock: no permission")

	// ErrWrongType: the key (or one of its auxiliary keys, a guard record or
	// an election's history) exists with a type or value this package could
	// not have written there: not a lock of the kind asked for. A
	// semaphore and a plain lock on one key also meet it. Nothing is
	// written when it is returned.
	ErrWrongType = errors.New("dlock: key holds a non-string value (not a lock)")

	// ErrReplicaAck: fewer replicas than Options.MinReplicas acknowledged a
	// grant (which was then released), a renewal, or a release (sent again
	// until ReleaseTimeout or the lock's deadline; the key may be freed on
	// the master all the same).
	ErrReplicaAck = errors.New("dlock: not enough replicas acknowledged the lock")

	// ErrEvictionPolicy: a Redis master the Client writes to may evict keys
	// under memory pressure (its maxmemory-policy is not noeviction), so a
	// lock key could vanish while its holder still holds it. Acquires
	// return it as an *EvictionError, unless Options.AllowEviction is set;
	// see Client.CheckServers.
	ErrEvictionPolicy = errors.New("dlock: redis may evict keys (maxmemory-policy is not noeviction)")

	// ErrExhausted: a Counter has no segment with enough left (Take).
	ErrExhausted = errors.New("dlock: counter exhausted")

	// ErrNoLeader: an election has no leader now (nobody holds it, or its
	// holder has not published itself yet).
	ErrNoLeader = errors.New("dlock: no leader")

	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("dlock: client closed")

	// ErrReleased is what Lock.Err reports after a successful Unlock. It
	// matches ErrNotHeld.
	ErrReleased = fmt.Errorf("%w: released", ErrNotHeld)

	// ErrInvalidArgument is matched by every bad-input error below. Bad input
	// is rejected before any Redis call (except a permit count above a
	// semaphore limit lowered by SetLimit, which only the acquire can see),
	// and no input makes the package panic. The messages name the value
	// given and the limit it broke.
	ErrInvalidArgument = errors.New("dlock: invalid argument")

	// ErrNilClient: New or a helper was given a nil Redis client.
	ErrNilClient = argError("nil redis client")
	// ErrNilContext: a call was given a nil context.
	ErrNilContext = argError("nil context")
	// ErrEmptyKey: a lock, election, counter or resource key is "".
	ErrEmptyKey = argError("empty key")
	// ErrKeyTooLong: a key longer than MaxKeyLength bytes.
	ErrKeyTooLong = argError(fmt.Sprintf("key longer than %d bytes", MaxKeyLength))
	// ErrInvalidTTL: a TTL below what the drift allowance (TTL*DriftFactor
	// + MinDrift) and, for a renewed lock, the renewal interval leave room
	// for, or above MaxTTL. It is returned wrapped, naming the value given
	// and the shortest and longest TTL that work with the Client's options.
	ErrInvalidTTL = argError("invalid TTL")
	// ErrInvalidOpts: an Options field or a combination of LockOptions that
	// cannot work; returned wrapped, naming the field and its value.
	ErrInvalidOpts = argError("invalid options")
	// ErrEmptyToken: package admin's ReleaseToken was given an empty token.
	ErrEmptyToken = argError("empty token")

	// ErrInvalidOwner: a Reentrant acquire without an owner (none given,
	// none bound to the context), or with the reserved SharedValue.
	ErrInvalidOwner = argError("reentrant owner empty (pass one, or bind one with ContextWithOwner) or reserved")
	// ErrInvalidLimit: a semaphore limit below 1 (Semaphore.SetLimit: below
	// 0) or above MaxSemaphoreLimit.
	ErrInvalidLimit = argError("semaphore limit must be at least 1")
	// ErrInvalidPermits: a Semaphore acquire of fewer than 1 permit or more
	// than the semaphore's limit (the limit given to Client.Semaphore, or a
	// lower one stored with Semaphore.SetLimit).
	ErrInvalidPermits = argError("permits must be at least 1 and at most the semaphore's limit")
	// ErrInvalidCount: a stripe or segment count, or an amount, below 1.
	ErrInvalidCount = argError("count must be at least 1")
	// ErrReservedKey: a lock (or fenced resource) key that is one of the
	// auxiliary names dlock derives from another lock key under the
	// Client's prefix (see package admin's Client.AuxKeyOf, and
	// docs/keys.md for the layout). The error names the key, the lock it
	// belongs to and its kind.
	ErrReservedKey = argError("key is reserved: it names auxiliary state of another lock")
	// ErrValueTooLong: a leader value longer than MaxLeaderValue bytes.
	ErrValueTooLong = argError(fmt.Sprintf("leader value longer than %d bytes", MaxLeaderValue))
)

// errLeftByClose is the loss cause of a lock Close could not release: the
// Client renews it no more, and Redis keeps it until its TTL.
var errLeftByClose = fmt.Errorf("%w before it could release the lock (Redis keeps it until its TTL)", ErrClosed)

// MaxKeyLength is the longest lock key accepted, in bytes.
const MaxKeyLength = 64 << 10

// argError is a bad-input error: distinct per kind, and all match
// ErrInvalidArgument.
type argError string

func (e argError) Error() string        { return "dlock: invalid argument: " + string(e) }
func (e argError) Is(target error) bool { return target == ErrInvalidArgument }

// ErrMaybeApplied: a change to a Counter whose reply was lost (a timeout,
// a broken connection, a cancelled context): it may or may not have been
// applied. Counter.Take returns it, with the segment, when taking the units
// may have happened (they are then not put back, and fn did not run), or
// joined with fn's error when putting them back may not have happened.
// Reconcile with Counter.Total or your own records; do not assume either
// outcome. It does not match ErrUnavailable, so that retry-on-unavailable
// code does not take the units twice.
var ErrMaybeApplied = errors.New("dlock: counter change may have been applied (its reply was lost)")

// maybeAppliedError is ErrMaybeApplied for one change.
type maybeAppliedError struct {
	op    string // "taking" or "putting back"
	key   string
	n     int64
	cause error
}

func (e *maybeAppliedError) Error() string {
	return fmt.Sprintf("%v: %s %d units of %q: %s", ErrMaybeApplied, e.op, e.n, e.key, oneline.Msg(e.cause))
}
func (e *maybeAppliedError) Is(target error) bool { return target == ErrMaybeApplied }
func (e *maybeAppliedError) Unwrap() error        { return e.cause }

// ErrSegmentMismatch: a Counter operation was called with a segment count
// other than the one the counter was created with (recorded in Redis
// beside its segments). Nothing was written. The error names the counter,
// the count given and, when it is known, the recorded one.
var ErrSegmentMismatch = errors.New("dlock: counter segment count differs from the recorded one")

// segmentMismatchError is ErrSegmentMismatch for one counter.
type segmentMismatchError struct {
	name     string
	given    int
	recorded int64 // 0: not recorded (a counter written by an older version)
}

func (e *segmentMismatchError) Error() string {
	if e.recorded > 0 {
		return fmt.Sprintf("%v: counter %q has %d segments, not %d", ErrSegmentMismatch, clip(e.name), e.recorded, e.given)
	}
	return fmt.Sprintf("%v: counter %q was written with a segment count other than %d", ErrSegmentMismatch, clip(e.name), e.given)
}
func (e *segmentMismatchError) Is(target error) bool { return target == ErrSegmentMismatch }

// reservedKeyError is ErrReservedKey for one key.
type reservedKeyError struct {
	key, lock string
	kind      string // the auxiliary kind (see package admin's AuxKind)
}

func (e *reservedKeyError) Error() string {
	return fmt.Sprintf("%v: %q is the %s of lock %q", ErrReservedKey, clip(e.key), e.kind, clip(e.lock))
}
func (e *reservedKeyError) Is(target error) bool {
	return target == ErrReservedKey || target == ErrInvalidArgument
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) <= 200 {
		return s
	}
	return s[:200] + "…"
}

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

// unavailable wraps an error of the Redis driver: ErrNoPermission if Redis
// refused it by ACL, else ErrUnavailable.
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	if pe := permissionOf(err); pe != nil {
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

// ctxDone is ErrContextDone for ctx, which has ended.
func ctxDone(ctx interface{ Err() error }) error {
	return &ctxDoneError{ctxErr: ctx.Err()}
}

// ctxDoneAfter is ErrContextDone for ctx, which ended after the Redis
// error cause (nil: none) while the call waited.
func ctxDoneAfter(ctx interface{ Err() error }, cause error) error {
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

// withRedisCause returns err, an ErrContextDone, with cause as its Redis
// cause if it has none.
func withRedisCause(err, cause error) error {
	var cd *ctxDoneError
	if cause == nil || !errors.As(err, &cd) || cd.cause != nil {
		return err
	}
	return &ctxDoneError{ctxErr: cd.ctxErr, cause: cause}
}

// ttlError is an ErrInvalidTTL naming the TTL given and the range that
// works (min 0: none does, with these options).
type ttlError struct {
	ttl, min, max time.Duration
	renew         bool
}

func (e *ttlError) Error() string {
	if e.min == 0 {
		return fmt.Sprintf("%v: %v: no TTL works with these DriftFactor, MinDrift and RenewInterval options", ErrInvalidTTL, e.ttl)
	}
	why := "1ms to MaxTTL"
	if e.min > time.Millisecond {
		why = "the drift allowance (TTL*DriftFactor + MinDrift) must leave a validity"
		if e.renew {
			why += " longer than the renewal interval"
		}
	}
	return fmt.Sprintf("%v: %v is outside %v..%v (%s)", ErrInvalidTTL, e.ttl, e.min.Round(time.Microsecond), e.max, why)
}

func (e *ttlError) Is(target error) bool {
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

// EvictionError is ErrEvictionPolicy naming the masters that may evict
// keys. It matches ErrEvictionPolicy.
type EvictionError struct {
	// Servers are the masters that may evict, each as "address has
	// policy" (a Sentinel client's master is "the Sentinel master").
	Servers []string
}

func (e *EvictionError) Error() string {
	return fmt.Sprintf("%v: %s (locks need noeviction; Options.AllowEviction runs anyway)", ErrEvictionPolicy, oneline.String(strings.Join(e.Servers, ", ")))
}

// Is makes an EvictionError match ErrEvictionPolicy.
func (e *EvictionError) Is(target error) bool { return target == ErrEvictionPolicy }

// keyTooLong is ErrKeyTooLong naming the length given.
func keyTooLong(n int) error { return fmt.Errorf("%w: %d bytes", ErrKeyTooLong, n) }

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
	return fmt.Sprintf("%v: the Redis user may not use a %s dlock needs (%s): %s", ErrNoPermission, e.What, grantHint[e.What], oneLineMsg(e.Err))
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

// permissionOf returns err as a *PermissionError if it is, or wraps, an
// ACL refusal by Redis: a NOPERM error reply, or the error of a command
// the ACL refused inside a script ("ERR The user executing the script
// can't ..." on Redis 7.0, "ERR ACL failure in script: ..." later).
// Otherwise nil.
func permissionOf(err error) *PermissionError {
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

// oneLineMsg is err's message on one line.
func oneLineMsg(err error) string {
	return oneline.Msg(err)
}

// refusedDoneError is the error of an acquiring call whose ctx ended while
// Redis refused its acquire (see attempt): it matches ErrContextDone and
// ctx's error, as any acquire the ctx ended, and ErrUnavailable, and it
// names the last refusal.
type refusedDoneError struct {
	ctxErr, refusal error
}

func (e *refusedDoneError) Error() string {
	return fmt.Sprintf("%v: %v; Redis refused the acquire until then: %v", ErrContextDone, e.ctxErr, oneLineMsg(e.refusal))
}
func (e *refusedDoneError) Is(target error) bool {
	return target == ErrContextDone || target == ErrUnavailable
}
func (e *refusedDoneError) Unwrap() []error { return []error{e.ctxErr, e.refusal} }
