package dlock

import (
	"context"
	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/keyspace"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
)

// Reentrant is a lock on one key that its owner may take again while it
// holds it, made by Client.Reentrant: while an owner holds the key,
// another acquire by the same owner succeeds at once (it does not queue
// behind waiters), and the key is free again only when every one of the
// owner's handles is unlocked (or has expired). Another owner waits as for
// any lock.
//
// The owner is any string the caller chooses, naming the work that may
// nest: a job id, a request id. It is stored in Redis, so two processes
// acting as the same owner (a retried job) share the hold. With owner ""
// the owner bound to the call's context by ContextWithOwner is used.
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
// A Reentrant holds no state of its own: it is safe for concurrent use.
type Reentrant struct {
	c   *Client
	key string
}

// Reentrant returns the reentrant lock on key. It makes no Redis call and
// returns no error: a bad key is reported by each method.
func (c *Client) Reentrant(key string) *Reentrant { return &Reentrant{c: c, key: key} }

// Lock takes the key for owner ("": the owner ContextWithOwner bound to
// ctx), at once if owner already holds it, else waiting as Client.Lock
// does. On success, it returns a new handle and a nil error; the key stays
// held until every handle is unlocked. On failure, it returns a nil *Lock
// and an error, and holds nothing: ErrInvalidOwner if there is no owner
// (none given, none bound) or it is "dlock:shared" (what a read-locked key
// holds); otherwise what
// Client.Lock returns. On a nil *Reentrant it returns ErrNilClient.
func (r *Reentrant) Lock(ctx context.Context, owner string, opts ...LockOption) (*Lock, error) {
	return r.acquire(ctx, owner, true, opts)
}

// TryLock makes exactly one attempt to take the key for owner (""
// as in Lock). On success, it returns a new handle and a nil error. On
// failure, it returns a nil *Lock and an error (a *NotAcquiredError
// matching ErrNotAcquired if another owner holds the key; otherwise as
// Lock), and holds nothing. On a nil *Reentrant it returns ErrNilClient.
func (r *Reentrant) TryLock(ctx context.Context, owner string, opts ...LockOption) (*Lock, error) {
	return r.acquire(ctx, owner, false, opts)
}

func (r *Reentrant) acquire(ctx context.Context, owner string, wait bool, opts []LockOption) (*Lock, error) {
	if r == nil || r.c == nil {
		return nil, ErrNilClient
	}
	return r.c.acquire(ctx, r.key, wait, opts, owned{owner})
}

// owned is the kind of a Reentrant's acquire: a handle of owner's hold
// ("": the owner bound to the call's context).
type owned struct{ owner string }

func (o owned) build(ctx context.Context, c *Client) (engine.Protocol, error) {
	if o.owner == keyspace.SharedValue {
		return nil, ErrInvalidOwner
	}
	if err := c.exclusiveOnly(); err != nil {
		return nil, err
	}
	owner := o.owner
	if owner == "" {
		owner, _ = ownerFromContext(ctx)
	}
	if owner == "" || owner == keyspace.SharedValue {
		return nil, ErrInvalidOwner
	}
	return reentrantLock{holdSet{q: c.queue, group: reentrantValue(owner), suffix: holdsSuffix}}, nil
}

type ownerKey struct{}

// ContextWithOwner returns a copy of ctx that carries a reentrant owner:
// Reentrant.Lock and TryLock with owner "" under it, or any context
// derived from it, act as that owner. With owner "" a fresh random owner
// id is made, so everything done under the returned context (and only
// that) is one owner. A nil ctx is taken as context.Background().
func ContextWithOwner(ctx context.Context, owner string) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	if owner == "" {
		owner = "owner:" + engine.NewToken()
	}
	return context.WithValue(ctx, ownerKey{}, owner)
}

// ownerFromContext returns the owner bound to ctx by ContextWithOwner.
func ownerFromContext(ctx context.Context) (string, bool) {
	if ctx == nil {
		return "", false
	}
	o, ok := ctx.Value(ownerKey{}).(string)
	return o, ok && o != ""
}

// reentrantValue is what the lock key holds while owner holds it.
func reentrantValue(owner string) string { return keyspace.ReentrantPrefix + owner }

// reentrantLock is the protocol of Reentrant: a shared hold whose group is
// the owner id (see holds.go). Waiters of other owners queue for an
// exclusive hand-off like token-lock waiters, so the two interoperate.
type reentrantLock struct {
	holdSet
}

func (r reentrantLock) Acquire(ctx context.Context, a engine.Attempt, k protocol.Keys, token string, ttl time.Duration) (engine.Grant, error) {
	c := protocol.Call{Script: scripts.ReentrantAcquire, Keys: []string{k.Lock, k.Fence, k.Queue, r.set(k), k.Waiters, k.Tombs},
		Args: []any{token, ttl.Milliseconds(), engine.FenceTTL(ttl).Milliseconds(), a.Mode.String(), a.Handoff(k), a.Lease.Milliseconds(), r.group}}
	g, err := grantOf(token, a.On().Run(ctx, c))
	return engine.Grant{Grant: g}, err
}
