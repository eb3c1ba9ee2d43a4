package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/scripts/releases"
	"time"

	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// tokenLock is the default Protocol: the key holds a random token with a
// PX TTL, fenced by a counter in the same slot, with a FIFO wait queue and
// direct hand-off (see internal/scripts/acquire.lua and release.lua).
type tokenLock struct {
	q *engine.Queue // the Client's queue settings
	// args are the Client's arguments of this protocol, boxed once (see
	// Client.newTokenLock); nil in a tokenLock not made by a Client.
	args *tokenArgs
}

// tokenArgs are the arguments a Client's token lock sends with every call,
// boxed once: each value in an interface is an allocation otherwise.
type tokenArgs struct {
	ttl           time.Duration // the Client's TTL; ttlMs and fttlMs are its
	ttlMs, fttlMs any
	modes         [len(engine.Modes)]any // each mode's argument (Mode.String)
	channel       any                    // the hand-off channel
	leaseMs       any                    // the waiter lease
	pickupMs      any                    // the pickup time
}

// newTokenArgs boxes q's arguments and those of the TTL ttl.
func newTokenArgs(q *engine.Queue, ttl time.Duration) *tokenArgs {
	a := &tokenArgs{ttl: ttl, ttlMs: ttl.Milliseconds(), fttlMs: engine.FenceTTL(ttl).Milliseconds(),
		channel: q.Channel, leaseMs: q.Lease.Milliseconds(), pickupMs: q.Pickup.Milliseconds()}
	for _, m := range engine.Modes {
		a.modes[m] = m.String()
	}
	return a
}

// handoff returns the boxed hand-off channel argument of an acquire on k:
// the one boxed, or on sharded pub/sub the slot's (see
// engine.Queue.Handoff).
func (a *tokenArgs) handoff(q *engine.Queue, k protocol.Keys) any {
	if q.Notify != nil && q.Notify.Sharded() {
		return q.Handoff(k)
	}
	return a.channel
}

// Reply of acquire.lua when the key is free but live waiters are ahead.
const freeButQueued = -2

func (tokenLock) acquireCall(a engine.Attempt, k protocol.Keys, token string, ttl time.Duration) protocol.Call {
	if !a.Mode.Queued() {
		// A try or a barge never queues: the script reads no payload and
		// no lease (each argument costs Redis a string per call).
		return protocol.Call{Script: scripts.Acquire, Keys: []string{k.Lock, k.Fence, k.Queue, k.Waiters, k.Tombs},
			Args: []any{token, ttl.Milliseconds(), engine.FenceTTL(ttl).Milliseconds(), a.Mode.String()}}
	}
	return protocol.Call{Script: scripts.Acquire, Keys: []string{k.Lock, k.Fence, k.Queue, k.Waiters, k.Tombs},
		Args: []any{token, ttl.Milliseconds(), engine.FenceTTL(ttl).Milliseconds(), a.Mode.String(), a.Handoff(k), a.Lease.Milliseconds()}}
}

func (t tokenLock) Acquire(ctx context.Context, a engine.Attempt, k protocol.Keys, token string, ttl time.Duration) (engine.Grant, error) {
	if t.args != nil && a.Queue == t.q {
		return t.grant(token, a.On().RunRaw(ctx, t.acquireRaw(a.Mode, k, token, ttl, a.Args)))
	}
	return t.grant(token, a.On().Run(ctx, t.acquireCall(a, k, token, ttl)))
}

// acquireRaw is acquireCall, in mode m with t's queue settings, as the
// arguments of its EVALSHA command, with the arguments boxed once
// (t.args) reused: the same command, with fewer allocations. Only for a t
// with args. buf, if not nil, holds k and token: the arguments are built
// in it, and refer to its keys and token (see engine.ArgBuf).
func (t tokenLock) acquireRaw(m engine.Mode, k protocol.Keys, token string, ttl time.Duration, buf *engine.ArgBuf) rexec.Raw {
	a := t.args
	ttlMs, fttlMs := a.ttlMs, a.fttlMs
	if ttl != a.ttl {
		ttlMs, fttlMs = ttl.Milliseconds(), engine.FenceTTL(ttl).Milliseconds()
	}
	var args []any
	if buf == nil {
		args = make([]any, 0, engine.ArgBufLen)
		args = append(args, "evalsha", acquireSHA, 5, k.Lock, k.Fence, k.Queue, k.Waiters, k.Tombs, token)
	} else {
		bk := buf.Keys
		args = append(buf.Args[:0], "evalsha", acquireSHA, 5, rexec.StringAt(&bk.Lock), rexec.StringAt(&bk.Fence),
			rexec.StringAt(&bk.Queue), rexec.StringAt(&bk.Waiters), rexec.StringAt(&bk.Tombs), rexec.StringAt(&buf.Value))
	}
	args = append(args, ttlMs, fttlMs, a.modes[m])
	if m.Queued() {
		args = append(args, a.handoff(t.q, k), a.leaseMs)
	}
	return rexec.Raw{Args: args, Src: acquireBody}
}

// Queued: the token lock's waiters queue in Redis.
func (tokenLock) Queued() bool { return true }

// grant decodes acquire.lua's reply.
func (tokenLock) grant(token string, cmd *redis.Cmd) (engine.Grant, error) {
	g, err := grantOf(token, cmd)
	return engine.Grant{Grant: g}, err
}

// grantOf decodes the reply of acquire.lua, and of every acquire script
// with the same replies: {1, fence}, {0, pttl or -2}, {-2, 0}.
func grantOf(token string, cmd *redis.Cmd) (protocol.Grant, error) {
	g := protocol.Grant{Value: token}
	res, err := cmd.Int64Slice()
	switch {
	case err != nil:
		return g, err
	case len(res) != 2:
		return g, errUnexpectedReply
	case res[0] == codeOK && res[1] >= 1: // fences start at 1 or above
		g.Acquired, g.Fence = true, uint64(res[1])
	case res[0] == codeWrongType:
		return g, ErrWrongType
	case res[0] == 0 && res[1] == freeButQueued:
		g.HolderTTL = 0
	case res[0] == 0 && res[1] >= -1: // a PTTL: -1 means no expiry
		g.HolderTTL = time.Duration(res[1]) * time.Millisecond
	default:
		// Never a grant, never a silent "not acquired": a reply the script
		// does not send means something else answered.
		return g, errUnexpectedReply
	}
	return g, nil
}

var errUnexpectedReply = errors.New("dlock: unexpected reply from the acquire script")

func (tokenLock) Renew(k protocol.Keys, token string, ttl time.Duration) (protocol.Call, string) {
	return protocol.Call{Script: scripts.Extend, Keys: []string{k.Lock, k.Fence},
		Args: []any{token, ttl.Milliseconds(), engine.FenceTTL(ttl).Milliseconds()}}, token
}

func (t tokenLock) Release(k protocol.Keys, token string) protocol.Call {
	return releases.Token(t.q.Pub(k), token, t.q.Pickup, releases.Release)
}

// ReleaseOn runs Release's call on x, as the arguments of its EVALSHA
// command (see acquireRaw) if t has its arguments boxed (see
// engine.RawReleaser).
func (t tokenLock) ReleaseOn(ctx context.Context, x *rexec.Exec, k protocol.Keys, token string, buf *engine.ArgBuf) *redis.Cmd {
	if t.args == nil {
		return x.Run(ctx, t.Release(k, token))
	}
	return x.RunRaw(ctx, t.releaseRaw(k, token, buf))
}

// releaseRaw is Release's call as the arguments of its EVALSHA command,
// with the arguments t boxed once reused, built in buf if it is not nil
// (see acquireRaw). Only for a t with args.
func (t tokenLock) releaseRaw(k protocol.Keys, token string, buf *engine.ArgBuf) rexec.Raw {
	if buf == nil {
		return rexec.Raw{Args: []any{"evalsha", releaseSHA, 4, k.Lock, k.Queue, k.Waiters, k.Tombs,
			token, t.q.Wake(k), t.args.pickupMs, "0"}, Src: releaseBody}
	}
	bk := buf.Keys
	var wake any
	if t.q.Notify == nil || !t.q.Notify.Sharded() {
		wake = rexec.StringAt(&bk.Wake) // what t.q.Wake(k) is then
	} else {
		wake = t.q.Wake(k)
	}
	args := append(buf.Args[:0], "evalsha", releaseSHA, 4, rexec.StringAt(&bk.Lock), rexec.StringAt(&bk.Queue),
		rexec.StringAt(&bk.Waiters), rexec.StringAt(&bk.Tombs), rexec.StringAt(&buf.Value), wake, t.args.pickupMs, "0")
	return rexec.Raw{Args: args, Src: releaseBody}
}

// Leave takes a waiter out of the queue and passes on a hand-off that
// reached it too late; on a holder it releases. The engine calls it when a
// waiter gives up, and after an acquire whose reply was lost.
func (t tokenLock) Leave(k protocol.Keys, token string) protocol.Call {
	return releases.Token(t.q.Pub(k), token, t.q.Pickup, releases.Leave)
}

// RenewsInBulk: Renew is extend.lua's call on the lock and fence keys,
// which the engine sends many at once (see engine.BulkRenewer).
func (tokenLock) RenewsInBulk() {}

// ReleaseTellsResend: its release script answers 1 to a second run of a
// release that ran (q_released), so a retry's other replies are losses
// (see engine.ResendTeller).
func (tokenLock) ReleaseTellsResend() {}

// BulkRelease: release_many.lua serves many of Release's calls at once,
// each lock's four keys and its first three arguments (token, wake
// channel, pickup time) in turn (see engine.BulkReleaser).
func (tokenLock) BulkRelease() (*redis.Script, int) { return scripts.ReleaseMany, 3 }
