package dlock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/dlock-go/dlock/internal/oneline"
)

// Every error the package returns matches one of these sentinels with
// errors.Is. Details are added by wrapping, never by new sentinel values.
var (
	// ErrNotAcquired: the lock is held by another owner. TryLock returns it
	// as a *NotAcquiredError, which carries the holder's remaining TTL.
	ErrNotAcquired = errs.ErrNotAcquired

	// ErrNotHeld: the operation needs a lock the caller holds, and it does
	// not (it was released, or it was lost). Every loss error matches it too.
	ErrNotHeld = errs.ErrNotHeld

	// ErrLost: the lock was lost while held. Lock.Err, Unlock and Extend
	// return it joined with the cause: ErrExpired, ErrTaken or ErrUnreachable.
	ErrLost = errs.ErrLost

	// ErrExpired: the lock key vanished before it was renewed or released
	// (it was deleted, or its TTL ran out), or its validity ran out locally.
	ErrExpired = errs.ErrExpired

	// ErrTaken: the lock key now holds another owner's token.
	ErrTaken = errs.ErrTaken

	// ErrUnreachable: Redis could not be reached to renew the lock before its
	// deadline, so the holder must assume it is gone.
	ErrUnreachable = errs.ErrUnreachable

	// ErrContextDone: the context ended before the lock was acquired,
	// joined with ctx.Err() and, if Redis failed or did not answer the last
	// attempt, with that error: errors.Is(err, ErrUnavailable) tells
	// "still held" from "Redis did not answer".
	ErrContextDone = errs.ErrContextDone

	// ErrUnavailable wraps an error from the Redis driver (network, timeout,
	// server error reply); errors.As reaches it. A Cluster node's refusal
	// of a call it did not run (TRYAGAIN, MOVED, …) is retried until the
	// ctx's deadline first, or until Close (ErrClosed).
	ErrUnavailable = errs.ErrUnavailable

	// ErrNoReply: Redis did not reply to a call in time (it may be paused,
	// overloaded or cut off). It comes with ErrUnavailable, and joined to
	// ErrContextDone when a waiting call's last attempt got no reply for at
	// least 250 ms.
	ErrNoReply = errs.ErrNoReply

	// ErrNoPermission: the Redis user's ACL refused a command, a key or a
	// channel dlock needs (see Options.NoPubSub), returned as a
	// *PermissionError naming it. It does not match ErrUnavailable:
	// retrying does not help until the ACL changes.
	ErrNoPermission = errs.ErrNoPermission

	// ErrWrongType: the key (or one of its auxiliary keys) holds a type or
	// value this package could not have written there: not a lock of the
	// kind asked for. Nothing is written.
	ErrWrongType = errs.ErrWrongType

	// ErrReplicaAck: fewer replicas than Options.MinReplicas acknowledged a
	// grant (which was then released), a renewal, or a release (the key
	// may be freed on the master all the same).
	ErrReplicaAck = errs.ErrReplicaAck

	// ErrEvictionPolicy: a Redis master the Client writes to may evict keys
	// (its maxmemory-policy is not noeviction). Acquires return it as an
	// *EvictionError unless Options.AllowEviction is set; see
	// Client.CheckServers.
	ErrEvictionPolicy = errors.New("dlock: redis may evict keys (maxmemory-policy is not noeviction)")

	// ErrExhausted: a Counter has no segment with enough left (Take).
	ErrExhausted = errors.New("dlock: counter exhausted")

	// ErrMaybeApplied: a Counter change whose reply was lost: it may or may
	// not have been applied. Counter.Take returns it, with the segment,
	// when the take may have happened (fn did not run), or joined with fn's
	// error when putting the units back may not have. Reconcile with
	// Counter.Total or your records. It does not match ErrUnavailable, so
	// retry-on-unavailable code does not take the units twice.
	ErrMaybeApplied = errors.New("dlock: counter change may have been applied (its reply was lost)")

	// ErrSegmentMismatch: a Counter operation with another segment count
	// than the one recorded in Redis for the counter. Nothing is written.
	ErrSegmentMismatch = errors.New("dlock: counter segment count differs from the recorded one")

	// ErrNoLeader: an election has no leader now (nobody holds it, or its
	// holder has not published itself yet).
	ErrNoLeader = errors.New("dlock: no leader")

	// ErrClosed: the Client was closed.
	ErrClosed = errs.ErrClosed

	// ErrReleased is what Lock.Err reports after a successful Unlock. It
	// matches ErrNotHeld.
	ErrReleased = errs.ErrReleased

	// ErrInvalidArgument is matched by every bad-input error below. Bad
	// input is rejected before any Redis call (but a permit count above a
	// limit lowered by SetLimit), never makes the package panic, and its
	// message names the value given and the limit it broke.
	ErrInvalidArgument = errs.ErrInvalidArgument

	// ErrNilClient: New or a helper was given a nil Redis client.
	ErrNilClient = errs.Arg("nil redis client")
	// ErrNilContext: a call was given a nil context.
	ErrNilContext = errs.ErrNilContext
	// ErrEmptyKey: a lock, election, counter or resource key is "".
	ErrEmptyKey = errs.Arg("empty key")
	// ErrKeyTooLong: a key longer than 65,536 bytes (64 KiB).
	ErrKeyTooLong = errs.Arg(fmt.Sprintf("key longer than %d bytes", keyrules.MaxKeyLength))
	// ErrInvalidTTL: a TTL too short for the drift allowance and the
	// renewal interval, or above MaxTTL; the error names the TTLs that work.
	ErrInvalidTTL = errs.ErrInvalidTTL
	// ErrInvalidOpts: an Options field or a combination of LockOptions that
	// cannot work; returned wrapped, naming the field and its value.
	ErrInvalidOpts = errs.Arg("invalid options")
	// ErrInvalidOwner: a Reentrant acquire without an owner (none given,
	// none bound to the context), or with the reserved "dlock:shared".
	ErrInvalidOwner = errs.Arg("reentrant owner empty (pass one, or bind one with ContextWithOwner) or reserved")
	// ErrInvalidLimit: a semaphore limit below 1 (Semaphore.SetLimit: below
	// 0) or above 2^50.
	ErrInvalidLimit = errs.Arg("semaphore limit must be at least 1")
	// ErrInvalidPermits: a Semaphore acquire of fewer than 1 permit or more
	// than the semaphore's limit.
	ErrInvalidPermits = errs.Arg("permits must be at least 1 and at most the semaphore's limit")
	// ErrInvalidCount: a stripe or segment count, or an amount, below 1.
	ErrInvalidCount = errs.Arg("count must be at least 1")
	// ErrReservedKey: a key that names auxiliary state dlock keeps for
	// another lock key (see docs/keys.md); the error names that lock.
	ErrReservedKey = errs.Arg("key is reserved: it names auxiliary state of another lock")
	// ErrValueTooLong: a leader value longer than MaxLeaderValue bytes.
	ErrValueTooLong = errs.Arg(fmt.Sprintf("leader value longer than %d bytes", MaxLeaderValue))
)

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

// EvictionError is ErrEvictionPolicy naming the masters that may evict
// keys. It matches ErrEvictionPolicy.
type EvictionError struct {
	// Servers are the masters that may evict, each as "address has
	// policy" (a Sentinel client's master is "the Sentinel master").
	Servers []string
}

// Error names the servers and their policies, on one line.
func (e *EvictionError) Error() string {
	return fmt.Sprintf("%v: %s (locks need noeviction; Options.AllowEviction runs anyway)", ErrEvictionPolicy, oneline.String(strings.Join(e.Servers, ", ")))
}

// Is makes an EvictionError match ErrEvictionPolicy.
func (e *EvictionError) Is(target error) bool { return target == ErrEvictionPolicy }

// keyTooLong is ErrKeyTooLong naming the length given.
func keyTooLong(n int) error { return fmt.Errorf("%w: %d bytes", ErrKeyTooLong, n) }

// NotAcquiredError is returned by TryLock when the key is held by another
// owner. It matches ErrNotAcquired. Key is the key; TTL is the holder's
// remaining time to live as the protocol reports it: for the token lock,
// Redis's PTTL; -1 means the key has no expiry (a foreign client set it
// without one); 0 means the key is free but waiters are queued ahead
// (FIFO: newcomers do not barge).
type NotAcquiredError = errs.NotAcquiredError

// CloseError is Client.Close's error when it could not release every lock
// the Client held (Redis unreachable or too slow within
// Options.ReleaseTimeout): Left of Total locks stay held in Redis until
// their TTL runs out. It matches ErrUnavailable, and Err holds the first
// few release errors.
type CloseError = errs.CloseError

// PermissionError is ErrNoPermission: Redis refused a command, key or
// channel to the user the Client connects as (its ACL). What says what
// was refused: "command", "key" or "channel" (Redis's reply names no
// more; "access" if it names none of them); Err is Redis's error reply.
type PermissionError = errs.PermissionError
