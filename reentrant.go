package dlock

import (
	"context"
	_ "embed"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reentrant makes Lock, TryLock and Do reentrant for owner: while owner
// holds the key, another acquire by the same owner succeeds at once (it
// does not queue behind waiters), and the key is free again only when
// every one of the owner's handles is unlocked (or has expired). Another
// owner waits as for any lock.
//
// The owner is any string the caller chooses, naming the work that may
// nest: a job id, a request id. It is stored in Redis, so two processes
// acting as the same owner (a retried job) share the hold. With owner ""
// the owner bound to the call's context by ContextWithOwner is used; a
// call without either fails with ErrInvalidOwner before any Redis call.
//
// Each acquisition returns its own *Lock (a handle) with its own lease:
// the watchdog renews every handle, so the key stays held as long as any
// handle is; a handle whose process died expires alone, after its TTL.
// Every handle of one hold has the same Fence, drawn when the hold began.
// The hold count is the number of live handles.
//
// The lock key holds "dlock:reentrant:" followed by the owner id, with a
// PX TTL (the longest of the handles' leases), so SET NX clients and
// dlock's other locks on the key are excluded while it is held. Only a
// reentrant hold of the same owner joins it: a key holding the bare owner
// id (another client's token, a legacy timestamp) is someone else's lock.
//
// Why no goroutine-based reentrancy (as some Redisson ports offer, keyed
// on a goroutine id parsed from runtime.Stack): Go has no supported
// goroutine id; one goroutine's work routinely moves to others (errgroup,
// handlers, pipelines), which would deadlock against their own caller; an
// id means nothing in another process, so a retried job could not rejoin
// its hold; and a recycled id would silently inherit a lock. An explicit
// owner, or one carried by the context, follows the work instead.
//
// Reentrant cannot be combined with WithProtocol, Shared or Semaphore.
func Reentrant(owner string) LockOption {
	return func(c *lockConfig) { c.kinds, c.owner = c.kinds|kindReentrant, owner }
}

type ownerKey struct{}

// ContextWithOwner returns a copy of ctx that carries a reentrant owner:
// Lock, TryLock and Do with Reentrant("") under it, or any context derived
// from it, act as that owner. With owner "" a fresh random owner id is
// made, so everything done under the returned context (and only that) is
// one owner. A nil ctx is taken as context.Background().
func ContextWithOwner(ctx context.Context, owner string) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	if owner == "" {
		owner = "owner:" + newToken()
	}
	return context.WithValue(ctx, ownerKey{}, owner)
}

// OwnerFromContext returns the owner bound to ctx by ContextWithOwner.
func OwnerFromContext(ctx context.Context) (string, bool) {
	if ctx == nil {
		return "", false
	}
	o, ok := ctx.Value(ownerKey{}).(string)
	return o, ok && o != ""
}

var (
	//go:embed scripts/reentrant_acquire.lua
	reentrantAcquireSrc    string
	reentrantAcquireScript = libScript(reentrantAcquireSrc)
)

// ReentrantPrefix starts what the lock key of a reentrant hold stores: the
// prefix, then the owner id. No other kind of lock stores a value with it
// (tokens have no ':', legacy values are digits, a read phase holds
// SharedValue), so a reentrant owner never mistakes another lock for its
// own hold.
const ReentrantPrefix = "dlock:reentrant:"

// reentrantValue is what the lock key holds while owner holds it.
func reentrantValue(owner string) string { return ReentrantPrefix + owner }

// ReentrantOwner decodes a lock key's value: the owner id of the reentrant
// hold it names, and whether it names one (for tools that show holders).
func ReentrantOwner(value string) (owner string, ok bool) {
	return strings.CutPrefix(value, ReentrantPrefix)
}

// reentrantLock is the protocol of Reentrant: a shared hold whose group is
// the owner id (see holds.go). Waiters of other owners queue for an
// exclusive hand-off like token-lock waiters, so the two interoperate.
type reentrantLock struct {
	holdSet
}

func (r reentrantLock) Acquire(ctx context.Context, rdb redis.UniversalClient, k Keys, token string, ttl time.Duration) (Grant, error) {
	c := Call{reentrantAcquireScript, []string{k.Lock, k.Fence, k.Queue, r.set(k)},
		[]any{token, ttl.Milliseconds(), fenceTTL(ttl).Milliseconds(), r.mode.String(), r.channel, r.lease.Milliseconds(), r.group}}
	return grantOf(token, c.Run(ctx, rdb))
}
