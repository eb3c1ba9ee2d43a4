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

	// ErrContextDone: the context ended before the lock was acquired. It is
	// joined with ctx.Err(), so errors.Is(err, context.DeadlineExceeded) works.
	// If Redis failed or did not answer while the call waited (the last
	// attempt got an error, or was still without a reply when the context
	// ended), that Redis error is joined too: errors.Is(err, ErrUnavailable)
	// then tells "still held" from "Redis did not answer".
	ErrContextDone = errs.ErrContextDone

	// ErrUnavailable wraps an error from the Redis driver (network, timeout,
	// server error reply). errors.As reaches the driver's own error. A
	// Cluster node's refusal of a call it did not run (TRYAGAIN, ASK,
	// MOVED, CLUSTERDOWN, LOADING, MASTERDOWN) is retried until the ctx's
	// deadline first; the error then names the last refusal. Close ends
	// those retries: the call then returns ErrClosed, naming the refusal.
	ErrUnavailable = errs.ErrUnavailable

	// ErrNoReply: Redis did not reply to a call in time (the driver's read
	// timeout passed, or the context ended while the call was in flight):
	// it may be paused, overloaded, or cut off. It comes with ErrUnavailable.
	// A waiting call whose context ends returns it joined to ErrContextDone
	// if its last attempt got no reply for at least 250 ms; its absence does
	// not prove Redis answered, since a waiting call may be asleep when
	// Redis stops, or have sent its last attempt a moment before the
	// deadline.
	ErrNoReply = errs.ErrNoReply

	// ErrNoPermission: the Redis user's ACL refused something dlock needs:
	// a command (EVAL and EVALSHA, or one a script runs), a key (the lock
	// key or one of its auxiliary keys under Options.Prefix), or a channel
	// (SUBSCRIBE to the Client's channels, which a waiting call needs unless
	// Options.NoPubSub is set). It is returned as a *PermissionError, which
	// names what was refused. It does not match ErrUnavailable: retrying does
	// not help until the ACL changes. A script refused before it ran wrote
	// nothing; dlock's scripts publish by a call whose refusal cannot end
	// them, so a refused publish loses only a wake-up.
	ErrNoPermission = errs.ErrNoPermission

	// ErrWrongType: the key (or one of its auxiliary keys, a guard record or
	// an election's history) exists with a type or value this package could
	// not have written there: not a lock of the kind asked for. A
	// semaphore and a plain lock on one key also meet it. Nothing is
	// written when it is returned.
	ErrWrongType = errs.ErrWrongType

	// ErrReplicaAck: fewer replicas than Options.MinReplicas acknowledged a
	// grant (which was then released), a renewal, or a release (sent again
	// until ReleaseTimeout or the lock's deadline; the key may be freed on
	// the master all the same).
	ErrReplicaAck = errs.ErrReplicaAck

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
	ErrClosed = errs.ErrClosed

	// ErrReleased is what Lock.Err reports after a successful Unlock. It
	// matches ErrNotHeld.
	ErrReleased = errs.ErrReleased

	// ErrInvalidArgument is matched by every bad-input error below. Bad input
	// is rejected before any Redis call (except a permit count above a
	// semaphore limit lowered by SetLimit, which only the acquire can see),
	// and no input makes the package panic. The messages name the value
	// given and the limit it broke.
	ErrInvalidArgument = errs.ErrInvalidArgument

	// ErrNilClient: New or a helper was given a nil Redis client.
	ErrNilClient = errs.Arg("nil redis client")
	// ErrNilContext: a call was given a nil context.
	ErrNilContext = errs.ErrNilContext
	// ErrEmptyKey: a lock, election, counter or resource key is "".
	ErrEmptyKey = errs.Arg("empty key")
	// ErrKeyTooLong: a key longer than 65,536 bytes (64 KiB).
	ErrKeyTooLong = errs.Arg(fmt.Sprintf("key longer than %d bytes", keyrules.MaxKeyLength))
	// ErrInvalidTTL: a TTL below what the drift allowance (TTL*DriftFactor
	// + MinDrift) and, for a renewed lock, the renewal interval leave room
	// for, or above MaxTTL. It is returned wrapped, naming the value given
	// and the shortest and longest TTL that work with the Client's options.
	ErrInvalidTTL = errs.ErrInvalidTTL
	// ErrInvalidOpts: an Options field or a combination of LockOptions that
	// cannot work; returned wrapped, naming the field and its value.
	ErrInvalidOpts = errs.Arg("invalid options")

	// ErrInvalidOwner: a Reentrant acquire without an owner (none given,
	// none bound to the context), or with the reserved "dlock:shared" (what a
	// read-locked key holds).
	ErrInvalidOwner = errs.Arg("reentrant owner empty (pass one, or bind one with ContextWithOwner) or reserved")
	// ErrInvalidLimit: a semaphore limit below 1 (Semaphore.SetLimit: below
	// 0) or above 2^50.
	ErrInvalidLimit = errs.Arg("semaphore limit must be at least 1")
	// ErrInvalidPermits: a Semaphore acquire of fewer than 1 permit or more
	// than the semaphore's limit (the limit given to Client.Semaphore, or a
	// lower one stored with Semaphore.SetLimit).
	ErrInvalidPermits = errs.Arg("permits must be at least 1 and at most the semaphore's limit")
	// ErrInvalidCount: a stripe or segment count, or an amount, below 1.
	ErrInvalidCount = errs.Arg("count must be at least 1")
	// ErrReservedKey: a lock (or fenced resource) key that is one of the
	// auxiliary names dlock derives from another lock key under the
	// Client's prefix (see package admin's Client.AuxKeyOf, and
	// docs/keys.md for the layout). The error names the key, the lock it
	// belongs to and its kind.
	ErrReservedKey = errs.Arg("key is reserved: it names auxiliary state of another lock")
	// ErrValueTooLong: a leader value longer than MaxLeaderValue bytes.
	ErrValueTooLong = errs.Arg(fmt.Sprintf("leader value longer than %d bytes", MaxLeaderValue))
)

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
