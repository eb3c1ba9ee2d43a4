package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// tokenLock is the default Protocol: the key holds a random token with a
// PX TTL, fenced by a counter in the same slot, with a FIFO wait queue and
// direct hand-off (see scripts/acquire.lua and scripts/release.lua).
type tokenLock struct {
	queueMode
}

// fenceTTL is how long the fence counter outlives a grant. The counter may
// expire after that: the next grant then starts from the server's TIME in
// microseconds, which by then is above every fence handed out before.
func fenceTTL(ttl time.Duration) time.Duration { return ttl + 10*time.Second }

// Reply of acquire.lua when the key is free but live waiters are ahead.
const freeButQueued = -2

func (t tokenLock) acquireCall(k protocol.Keys, token string, ttl time.Duration) protocol.Call {
	if !t.mode.queued() {
		// A try or a barge never queues: the script reads no payload and
		// no lease (each argument costs Redis a string per call).
		return protocol.Call{Script: acquireScript, Keys: []string{k.Lock, k.Fence, k.Queue},
			Args: []any{token, ttl.Milliseconds(), fenceTTL(ttl).Milliseconds(), t.mode.String()}}
	}
	return protocol.Call{Script: acquireScript, Keys: []string{k.Lock, k.Fence, k.Queue},
		Args: []any{token, ttl.Milliseconds(), fenceTTL(ttl).Milliseconds(), t.mode.String(), t.channel, t.lease.Milliseconds()}}
}

func (t tokenLock) Acquire(ctx context.Context, rdb redis.UniversalClient, k protocol.Keys, token string, ttl time.Duration) (protocol.Grant, error) {
	return t.grant(token, runScript(ctx, rdb, t.acquireCall(k, token, ttl)))
}

// grant decodes acquire.lua's reply.
func (tokenLock) grant(token string, cmd *redis.Cmd) (protocol.Grant, error) {
	return grantOf(token, cmd)
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
	return protocol.Call{Script: extendScript, Keys: []string{k.Lock, k.Fence},
		Args: []any{token, ttl.Milliseconds(), fenceTTL(ttl).Milliseconds()}}, token
}

func (t tokenLock) Release(k protocol.Keys, token string) protocol.Call {
	return protocol.Call{Script: releaseScript, Keys: []string{k.Lock, k.Queue}, Args: []any{token, k.Wake, t.pickup.Milliseconds(), "0"}}
}

// Leave takes a waiter out of the queue and passes on a hand-off that
// reached it too late; on a holder it releases. The engine calls it when a
// waiter gives up, and after an acquire whose reply was lost.
func (t tokenLock) Leave(k protocol.Keys, token string) protocol.Call {
	return protocol.Call{Script: releaseScript, Keys: []string{k.Lock, k.Queue}, Args: []any{token, k.Wake, t.pickup.Milliseconds(), "1"}}
}
