package dlock

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Protocol decides what a lock key holds and which commands take, renew
// and release it. The Client's engine does everything else the same way
// for every protocol: waiting and wake-ups, the renewal watchdog, the
// deadline, the lost-lock signal, hooks and stats. The default is the
// token lock (SET key token NX PX); package legacy provides the
// SETNX/GETSET timestamp lock. Select one per call with WithProtocol.
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
	// The script must reply 1 renewed, 0 key gone, -1 another owner's
	// value, -2 not a string.
	Renew(k Keys, value string, ttl time.Duration) (c Call, next string)

	// Release returns the script call that deletes k.Lock if it holds
	// value, with the same replies as Renew, and publishes on k.Wake.
	Release(k Keys, value string) Call
}

// A DirectProtocol renews and releases by itself rather than by one script
// call on the Client's connection, for locks that span several servers
// (package redlock). The engine calls RenewDirect and ReleaseDirect instead
// of running Renew's and Release's calls; the watchdog runs the renewals of
// such locks concurrently, each bounded by the lock's deadline. Replies use
// the same codes as the scripts (1 ok, 0 gone, -1 another owner, -2 not a
// string).
type DirectProtocol interface {
	Protocol
	RenewDirect(ctx context.Context, k Keys, value string, ttl time.Duration) (next string, code int64, err error)
	ReleaseDirect(ctx context.Context, k Keys, value string) (code int64, err error)
}

// Keys names the Redis keys of one lock (see the package doc's key layout).
type Keys struct {
	Lock  string // the lock key, exactly as the caller gave it
	Fence string // the fencing counter, in Lock's Cluster slot
	Wake  string // the wake-up channel for waiters that do not queue
	Queue string // the FIFO wait queue; waiter leases are Queue+":"+token
}

// Grant is the outcome of one Protocol.Acquire attempt.
type Grant struct {
	Acquired  bool
	Value     string        // what the key holds for the caller
	Fence     uint64        // the grant's fencing token (0: the protocol has none)
	HolderTTL time.Duration // if not acquired: the holder's remaining TTL, negative if unknown

	// keys and fences: a multi-key grant's keys, in order, and the fence of
	// each (Fence is fences[0]).
	keys   []string
	fences []uint64
}

// Call is one script invocation. It runs by EVALSHA, falling back to EVAL
// on NOSCRIPT, alone or in the watchdog's pipelines.
type Call struct {
	Script *redis.Script
	Keys   []string
	Args   []any
}

// WithProtocol makes the call use p instead of the token lock. It cannot
// be combined with Shared, Reentrant or Semaphore (ErrInvalidOpts).
func WithProtocol(p Protocol) LockOption {
	return func(c *lockConfig) { c.proto, c.kinds = p, c.kinds|kindProtocol }
}

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

func (t tokenLock) acquireCall(k Keys, token string, ttl time.Duration) Call {
	return Call{acquireScript, []string{k.Lock, k.Fence, k.Queue},
		[]any{token, ttl.Milliseconds(), fenceTTL(ttl).Milliseconds(), t.mode.String(), t.channel, t.lease.Milliseconds()}}
}

func (t tokenLock) Acquire(ctx context.Context, rdb redis.UniversalClient, k Keys, token string, ttl time.Duration) (Grant, error) {
	return t.grant(token, t.acquireCall(k, token, ttl).Run(ctx, rdb))
}

// grant decodes acquire.lua's reply.
func (tokenLock) grant(token string, cmd *redis.Cmd) (Grant, error) { return grantOf(token, cmd) }

// grantOf decodes the reply of acquire.lua, and of every acquire script
// with the same replies: {1, fence}, {0, pttl or -2}, {-2, 0}.
func grantOf(token string, cmd *redis.Cmd) (Grant, error) {
	g := Grant{Value: token}
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

func (tokenLock) Renew(k Keys, token string, ttl time.Duration) (Call, string) {
	return Call{extendScript, []string{k.Lock, k.Fence},
		[]any{token, ttl.Milliseconds(), fenceTTL(ttl).Milliseconds()}}, token
}

func (t tokenLock) Release(k Keys, token string) Call {
	return Call{releaseScript, []string{k.Lock, k.Queue}, []any{token, k.Wake, t.pickup.Milliseconds(), "0"}}
}

// Leave takes a waiter out of the queue and passes on a hand-off that
// reached it too late; on a holder it releases. The engine calls it when a
// waiter gives up, and after an acquire whose reply was lost.
func (t tokenLock) Leave(k Keys, token string) Call {
	return Call{releaseScript, []string{k.Lock, k.Queue}, []any{token, k.Wake, t.pickup.Milliseconds(), "1"}}
}

// leaver is implemented by protocols whose waiters queue in Redis.
type leaver interface {
	Leave(k Keys, value string) Call
}

// withdraw removes value from k, held or queued: a leaving waiter, or the
// clean-up after an acquire whose reply was lost.
func withdraw(ctx context.Context, rdb redis.UniversalClient, p Protocol, k Keys, value string) error {
	if l, ok := p.(leaver); ok {
		return l.Leave(k, value).Run(ctx, rdb).Err()
	}
	if d, ok := p.(DirectProtocol); ok {
		_, err := d.ReleaseDirect(ctx, k, value)
		return err
	}
	return p.Release(k, value).Run(ctx, rdb).Err()
}

// renewOnce renews value on k for ttl, by script or directly.
func renewOnce(ctx context.Context, rdb redis.UniversalClient, p Protocol, k Keys, value string, ttl time.Duration) (next string, code int64, err error) {
	if d, ok := p.(DirectProtocol); ok {
		return d.RenewDirect(ctx, k, value, ttl)
	}
	c, next := p.Renew(k, value, ttl)
	code, err = c.Run(ctx, rdb).Int64()
	return next, code, err
}

// releaseOnce releases value on k, by script or directly.
func releaseOnce(ctx context.Context, rdb redis.UniversalClient, p Protocol, k Keys, value string) (int64, error) {
	if d, ok := p.(DirectProtocol); ok {
		return d.ReleaseDirect(ctx, k, value)
	}
	if code, err, ok := sentRelease(ctx, value); ok { // Close sent it in a pipeline
		return code, err
	}
	return p.Release(k, value).Run(ctx, rdb).Int64()
}

// scriptRaised reports whether the error reply re was raised by a script
// while it ran (a failing redis.call, a Lua error, SCRIPT KILL), rather
// than refused before it started (NOSCRIPT, BUSY, MOVED, LOADING...).
// Redis does not roll back a script's writes when it fails, so such an
// error is ambiguous, never definite: the scripts check every type before
// their first write, but one raised after a write would otherwise leave
// a key written that nobody withdraws. Redis 7 ends these replies with
// "script: <sha>, on @user_script:<line>."; Redis 6 starts them with
// "ERR Error running script".
func scriptRaised(re redis.Error) bool {
	msg := re.Error()
	return strings.Contains(msg, "@user_script:") || strings.Contains(msg, "Error running script") ||
		strings.Contains(msg, "user_script:")
}
