// release.go owns the operator's releases: ForceRelease, which ends a
// key's every hold, and ReleaseToken, which ends one holder's.

package admin

import (
	"context"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/oneline"
	"github.com/dlock-go/dlock/internal/scripts/releases"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// ForceRelease releases key whoever holds it, for every kind of lock: an
// operator's steal, the one way to release a lock without its token. A
// token, legacy or foreign lock, a reentrant hold (all of its handles) or
// a read lock (all of its readers) is deleted and handed to the first
// queued waiter (or its waiters are woken); every holder of a semaphore
// gives its permits back (see ReleaseToken for where they go). The holders
// find out at their next renewal (dlock.ErrExpired or dlock.ErrTaken).
//
// It releases what it finds: a string lock only while the key still
// holds the value ForceRelease read, a semaphore's holders one by one by
// their tokens. So a release that lands after the key changed hands (a
// command delayed past its caller's timeout, or a hand-off between the
// read and the release) leaves the new holder alone. A read lock or a
// reentrant hold, whose value names no single grant, is released with
// whatever joined it since.
//
// It reports whether anything was released. A key that is neither a
// string nor a semaphore is left alone (dlock.ErrWrongType); one of
// dlock's auxiliary keys (a fence counter, a semaphore limit, a Counter
// segment, ...) is refused before any Redis call (dlock.ErrReservedKey).
func (c *Client) ForceRelease(ctx context.Context, key string) (bool, error) {
	if ctx == nil {
		return false, dlock.ErrNilContext
	}
	if err := c.validKey(key); err != nil {
		return false, err
	}
	ks := c.KeysFor(key)
	var typ *redis.StatusCmd
	var members *redis.StringSliceCmd
	var val *redis.StringCmd
	_, _ = c.exec.Pipelined(ctx, func(p redis.Pipeliner) error {
		typ = p.Type(ctx, key)
		members = p.ZRange(ctx, key, 0, -1)
		val = p.Get(ctx, key)
		return nil
	})
	if err := typ.Err(); err != nil {
		return false, unavailable(err)
	}
	switch typ.Val() {
	case "none":
		return false, nil
	case "string":
		return c.forceString(ctx, ks, val.Val())
	case "zset":
		// Every holder found gives its permits back, one script each.
		released := false
		for _, m := range members.Val() {
			code, err := c.exec.Run(ctx, c.semaphoreRelease(ks, m, releases.Force)).Int64()
			switch {
			case err != nil:
				return released, unavailable(err)
			case code == codeOK:
				released = true
			}
		}
		return released, nil
	default:
		return false, dlock.ErrWrongType
	}
}

// forceString releases the string lock key ks.Lock if it still holds v,
// the value ForceRelease read: a release that lands after the key changed
// hands (its command delayed past its caller's timeout) leaves the new
// holder alone.
func (c *Client) forceString(ctx context.Context, ks protocol.Keys, v string) (bool, error) {
	// The hold set a shared hold's value may name: its handles are marked
	// stolen, so that their holders' releases report the loss.
	suffix := keyspace.HoldsSuffix
	if v == SharedValue {
		suffix = keyspace.ReadersSuffix
	}
	call := releases.Token(c.pub(ks), v, c.pickup, releases.Force)
	call.Keys = append(call.Keys, keyspace.Aux(ks, suffix))
	code, err := c.exec.Run(ctx, call).Int64()
	switch {
	case err != nil:
		return false, unavailable(err)
	case code == codeWrongType:
		return false, dlock.ErrWrongType
	}
	return code == codeOK, nil
}

// semaphoreRelease is the release of token's permits on the semaphore ks
// in mode, as admin calls give permits back. The limit lives in the
// callers' handles (or in Redis, set by SetLimit), so an admin release
// passes none (0): it hands the freed permits to the queued waiters only
// under a stored limit; without one it wakes the first queued waiter,
// whose own acquire takes what its limit lets in (semaphore_release.lua).
func (c *Client) semaphoreRelease(ks protocol.Keys, token, mode string) protocol.Call {
	return releases.Semaphore(c.pub(ks), token, c.pickup, mode, 0)
}

// ReleaseToken releases the hold of token on key, as its holder's Unlock
// would: for a process that lost its *Lock (crashed and restarted), or
// another program, like `dlock release --token`. token is what the
// holder's Lock.Token returned (DLOCK_TOKEN for `dlock run`), for every
// kind of lock: a token lock's token, or a handle's own token of a
// reentrant hold, a read lock or a semaphore, which releases that handle
// only. Nothing else releases anything: a reentrant owner id or
// SharedValue is not a token (ForceRelease is the operator's way to
// steal).
//
// A semaphore's limit is what its callers pass (dlock.Client.Semaphore), which
// an admin call does not know: the permits it frees go to the queued
// waiters under a limit stored with Semaphore.SetLimit; without one, it
// hands out nothing and wakes the first queued waiter instead, whose own
// acquire takes what its limit lets in (and passes the rest on). Either
// way no admin release lets a semaphore go above the limit its callers use.
//
// The token is the holder's credential: a release by it counts as the
// holder's own, so the holder's Unlock within the next 10 s returns nil
// (its renewal, if it comes first, reports the lock gone). A legacy lock
// (a decimal timestamp) is released as its protocol's release does it, at
// most once, since its timestamp is not unique to one holder.
//
// It returns nil if it released the hold, an error matching
// dlock.ErrNotHeld and dlock.ErrExpired if the key is gone, dlock.ErrNotHeld
// and dlock.ErrTaken if it is held but not by token, dlock.ErrWrongType if
// it is not a lock, ErrEmptyToken for an empty token,
// dlock.ErrReservedKey for one of dlock's auxiliary keys.
func (c *Client) ReleaseToken(ctx context.Context, key, token string) error {
	if ctx == nil {
		return dlock.ErrNilContext
	}
	if err := c.validKey(key); err != nil {
		return err
	}
	if token == "" {
		return ErrEmptyToken
	}
	ks := c.KeysFor(key)
	var typ *redis.StatusCmd
	var val *redis.StringCmd
	var holds *redis.IntCmd
	var member *redis.FloatCmd
	_, _ = c.exec.Pipelined(ctx, func(p redis.Pipeliner) error {
		typ = p.Type(ctx, key)
		val = p.Get(ctx, key)
		member = p.ZScore(ctx, key, token)
		holds = p.Exists(ctx, keyspace.Aux(ks, keyspace.HoldsSuffix))
		return nil
	})
	if err := typ.Err(); err != nil {
		return unavailable(err)
	}
	var call protocol.Call
	switch typ.Val() {
	case "none":
		return oneline.Chain(dlock.ErrNotHeld, dlock.ErrExpired)
	case "zset":
		if member.Err() != nil { // not a holder: leave the semaphore alone
			return oneline.Chain(dlock.ErrNotHeld, dlock.ErrTaken)
		}
		call = c.semaphoreRelease(ks, token, releases.Release)
	case "string":
		switch v := val.Val(); {
		case v == SharedValue:
			call = releases.Holds(c.pub(ks), keyspace.ReadersSuffix, token, v, c.pickup, releases.Release)
		case holds.Val() > 0 || isReentrantValue(v):
			// A reentrant hold: v names the owner, which is no credential;
			// only a handle's token in the hold set releases (that handle).
			call = releases.Holds(c.pub(ks), keyspace.HoldsSuffix, token, v, c.pickup, releases.Release)
		case classify(v) == KindLegacy:
			call = legacyRelease(ks, token)
		default:
			call = releases.Token(c.pub(ks), token, c.pickup, releases.Release)
		}
	default:
		return dlock.ErrWrongType
	}
	return c.releaseResult(ctx, key, c.exec.Run(ctx, call))
}

// releaseResult is ReleaseToken's answer to the reply cmd of its release
// of key.
func (c *Client) releaseResult(ctx context.Context, key string, cmd *redis.Cmd) error {
	code, err := cmd.Int64()
	switch {
	case err != nil:
		return unavailable(err)
	case code == codeOK:
		return nil
	case code == codeWrongType:
		return dlock.ErrWrongType
	case code == codeGone, code == codeStolen:
		// The key may still be held, by other handles than token (or,
		// stolen by ForceRelease, by anyone since).
		if info, err := c.Inspect(ctx, key); err == nil && info.Held {
			return oneline.Chain(dlock.ErrNotHeld, dlock.ErrTaken)
		}
		return oneline.Chain(dlock.ErrNotHeld, dlock.ErrExpired)
	default:
		return oneline.Chain(dlock.ErrNotHeld, dlock.ErrTaken)
	}
}

func isReentrantValue(v string) bool {
	_, ok := ReentrantOwner(v)
	return ok
}

// The replies of the release scripts.
const (
	codeOK        = protocol.ReplyOK
	codeGone      = protocol.ReplyGone
	codeWrongType = protocol.ReplyWrongType
	codeStolen    = -3 // ForceRelease took the token's hold (every release script)
)

// pub returns ks with its wake-up channel as a release script's argument:
// on a Cluster marked for SPUBLISH, where dlock Clients listen on it as a
// shard channel (see internal/notify's shard.go).
func (c *Client) pub(ks protocol.Keys) protocol.Keys {
	if _, ok := c.rdb.(*redis.ClusterClient); ok {
		ks.Wake = notify.ShardMark + ks.Wake
	}
	return ks
}
