package protocol

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Protocol decides what a lock key holds and which commands take, renew
// and release it (see the package doc for what the engine does around it).
//
// Implementations must be safe for concurrent use. The engine never runs
// two Renew or Release calls of one lock at the same time.
type Protocol interface {
	// Acquire makes one attempt to take k.Lock for ttl. token is a fresh
	// random token the protocol may store. On success Grant.Acquired is
	// true and Grant.Value is what the key now holds for the caller. If
	// the key is held by someone else, Grant.HolderTTL is how long it has
	// left (negative if unknown). If err is not nil but the attempt may
	// have written the key (a lost reply), Grant.Value names what it would
	// have written, so the engine can delete it if it is there: set it only
	// when deleting that value, if present, is safe.
	Acquire(ctx context.Context, rdb redis.UniversalClient, k Keys, token string, ttl time.Duration) (Grant, error)

	// Renew returns the script call that extends the caller's hold of
	// k.Lock, which holds value, to ttl; and the value the key holds after
	// it succeeds (the same value, for protocols that do not rotate it).
	// The script must reply with one of the reply codes: ReplyOK renewed,
	// ReplyGone key gone, ReplyOtherOwner another owner's value,
	// ReplyWrongType not a string.
	//
	// A renewal must never move the key's expiry earlier: on ReplyOK the
	// key lives at least ttl from when the script ran, and no less than it
	// did before (PEXPIRE key ms GT, or ZADD GT for a score that is a
	// lease's end, or a compare-and-set on a value every renewal rotates).
	// The engine relies on it: a renewal's call may run late (after the
	// engine gave up on it, after a later renewal of the same lock) or
	// twice (the Redis client re-sends it), and the engine never lowers a
	// lock's Deadline for a renewal, whether it succeeded for a shorter
	// TTL or got no reply. A renewal that can shorten the expiry lets the
	// key expire while its holder believes it holds the lock. The same
	// rule holds for a DirectProtocol's RenewDirect, on each server.
	Renew(k Keys, value string, ttl time.Duration) (c Call, next string)

	// Release returns the script call that deletes k.Lock if it holds
	// value, with the same replies as Renew, and publishes on k.Wake.
	// A release whose reply was lost may have run; the engine retries it
	// (a repeated Unlock, Close) by sending the same Call again, as the
	// Redis client re-sends a command after a broken connection. If value
	// is not unique to one holder, put an id of the release in the call's
	// arguments, so that a release that ran once answers a repeat without
	// deleting whoever holds value since (package legacy does).
	Release(k Keys, value string) Call
}
