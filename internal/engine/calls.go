// calls.go owns how the engine calls a protocol (package protocol): the
// withdrawal, renewal and release of one value, by script or directly,
// and the optional methods a protocol may have.

package engine

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// RawReleaser is implemented by a protocol that sends its release on the
// engine's executor itself (the token lock: as the built arguments of its
// EVALSHA, with fewer allocations than its Call). buf, if not nil, holds
// k and token, and is the release's to build its arguments in (see
// ArgBuf).
type RawReleaser interface {
	ReleaseOn(ctx context.Context, x *rexec.Exec, k protocol.Keys, token string, buf *ArgBuf) *redis.Cmd
}

// ArgBuf is storage for the arguments of one script command: the keys and
// the token of the call, which the arguments refer to (rexec.StringAt)
// instead of boxing copies of them, and room for the arguments themselves.
// An ArgBuf serves one command and its resends (after a refusal, or
// NOSCRIPT), never a second command: one whose caller left before its
// reply may still be sent from it later. Neither *Keys nor Value is
// written again once an ArgBuf was handed out.
type ArgBuf struct {
	Keys  *protocol.Keys
	Value string
	Args  [ArgBufLen]any
}

// ArgBufLen is the most arguments an ArgBuf holds: those of acquire.lua's
// EVALSHA in a queued mode.
const ArgBufLen = 14

// ResendTeller is implemented by the protocols whose release script tells
// a second run of a release that ran already (its reply was lost, and the
// caller retried) from a release that found the hold gone: the first run
// leaves a tombstone of the token (q_released in
// internal/lualib/queue.lua), and a run that finds the hold gone but the
// tombstone there answers codeOK. Their codeGone or codeOther is then a
// loss even on a retry: the hold was gone before any release of it ran
// (expired and taken since, or taken by an operator's ForceRelease more
// than a tombstone's span ago; within it, the steal's mark answers
// CodeStolen). multi_release.lua tells key by key: a key the
// first run found not ours keeps another tombstone (q_mark_lost), and the
// second run's verdict on it stands.
type ResendTeller interface {
	ReleaseTellsResend()
}

// DirectLeaver is implemented by a protocol whose withdrawal is more than
// one script call on the Client's connection: with Options.MinReplicas,
// the leave and a WAIT on the key's master, so that the tombstone that
// refuses a late acquire of the token survives a failover. Withdraw calls
// it instead of Leave's call; an error (the replicas did not acknowledge)
// makes the caller send it again.
type DirectLeaver interface {
	LeaveDirect(ctx context.Context, k protocol.Keys, value string) error
}

// BulkRenewer is implemented by a protocol whose renewal of a lease is
// extend.lua's call on the lease's lock and fence keys (the token, the TTL
// and the fence counter's TTL, in milliseconds), storing the same token:
// the engine renews many such leases by one extend_many call, and builds
// the renewal itself, without the protocol's Renew. A Direct protocol
// renews by itself, never in bulk.
type BulkRenewer interface {
	RenewsInBulk()
}

// BulkReleaser is implemented by a protocol whose releases (Release's
// calls, which Close sends many at once) one call of another script may
// serve together: BulkRelease returns that script and how many of each
// release call's arguments it takes. Its call carries every release's
// keys, then those first arguments, lock after lock, and answers with one
// reply per lock, the one its own release call would have got. The
// engine sends a group of one as the release call itself.
type BulkReleaser interface {
	BulkRelease() (s *redis.Script, args int)
}

// Leaver is implemented by protocols whose waiters queue in Redis.
type Leaver interface {
	Leave(k protocol.Keys, value string) protocol.Call
}

// Withdraw removes value from k, held or queued: a leaving waiter, or the
// clean-up after an acquire whose reply was lost.
func Withdraw(ctx context.Context, x *rexec.Exec, p Protocol, k protocol.Keys, value string) error {
	if l, ok := p.(DirectLeaver); ok {
		return l.LeaveDirect(ctx, k, value)
	}
	if l, ok := p.(Leaver); ok {
		return x.Run(ctx, l.Leave(k, value)).Err()
	}
	if d, ok := p.(Direct); ok {
		_, err := d.ReleaseDirect(ctx, k, value)
		return err
	}
	return x.Run(ctx, p.Release(k, value)).Err()
}

// renewOnce renews value on k for ttl, by script or directly.
func renewOnce(ctx context.Context, x *rexec.Exec, p Protocol, k protocol.Keys, value string, ttl time.Duration) (next string, code int64, err error) {
	if d, ok := p.(Direct); ok {
		return d.RenewDirect(ctx, k, value, ttl)
	}
	c, next := p.Renew(k, value, ttl)
	code, err = x.Run(ctx, c).Int64()
	return next, code, err
}

// ReleaseOnce releases value on k, by script or directly.
func ReleaseOnce(ctx context.Context, x *rexec.Exec, p Protocol, k protocol.Keys, value string) (int64, error) {
	return releaseOnceIn(ctx, x, p, k, value, nil)
}

// releaseOnceIn is ReleaseOnce, whose release a RawReleaser builds in buf
// (nil: none).
func releaseOnceIn(ctx context.Context, x *rexec.Exec, p Protocol, k protocol.Keys, value string, buf *ArgBuf) (int64, error) {
	if d, ok := p.(Direct); ok {
		return d.ReleaseDirect(ctx, k, value)
	}
	if code, err, ok := sentRelease(ctx, value); ok { // Close sent it in a pipeline
		return code, err
	}
	if r, ok := p.(RawReleaser); ok {
		return r.ReleaseOn(ctx, x, k, value, buf).Int64()
	}
	return x.Run(ctx, p.Release(k, value)).Int64()
}

// Ambiguous reports whether err leaves unknown whether the command ran:
// anything but an error reply from Redis itself, and an error a script
// raised while running (it may have written before; see rexec.ScriptRaised).
func Ambiguous(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		return rexec.ScriptRaised(re)
	}
	return err != nil
}
