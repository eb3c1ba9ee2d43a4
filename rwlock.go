package dlock

import (
	"context"
	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/keyspace"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
)

// RWLock is a readers-writer lock on one key, made by Client.RWLock. Any
// number of readers (RLock) hold the key together, and no writer does
// meanwhile. A writer is any exclusive lock on the same key: RWLock.Lock,
// or Client.Lock, TryLock or Do (also from other programs, e.g.
// `dlock run KEY`).
//
// Each reader holds its own lease, renewed by the watchdog like a lock: a
// reader whose process died expires alone, after its own TTL, and never
// keeps the key for longer than that. The key holds "dlock:shared" while read
// (with the longest reader's TTL), so SET NX clients are excluded too.
//
// Writers are not starved: a reader does not get in while a writer waits
// ahead of it in the key's FIFO queue; the readers queued behind a writer
// get in together when it releases. Every reader grant and every writer
// grant draws a fencing token from the key's counter, so a resource can
// order reads and writes by Fence.
//
// An RWLock holds no state of its own: it is safe for concurrent use, and
// any number of them may name one key.
type RWLock struct {
	c   *Client
	key string
}

// RWLock returns the readers-writer lock on key. It makes no Redis call and
// returns no error: a bad key is reported by each method.
func (c *Client) RWLock(key string) *RWLock { return &RWLock{c: c, key: key} }

// RLock takes a read lock on the key, waiting (as Client.Lock does) while a
// writer holds it or waits ahead in the queue. On success, it returns the
// held lock and a nil error; release it with Unlock. On failure, it returns
// a nil *Lock and the error Client.Lock would (ErrContextDone,
// ErrUnavailable, ErrNoPermission, ErrWrongType, ErrClosed, or an
// ErrInvalidArgument, such as ErrInvalidOpts for WithProtocol), and holds
// nothing. On a nil *RWLock it returns ErrNilClient.
func (rw *RWLock) RLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return rw.acquire(ctx, true, true, opts)
}

// TryRLock makes exactly one attempt to take a read lock on the key. On
// success, it returns the held lock and a nil error. On failure, it returns
// a nil *Lock and an error (a *NotAcquiredError matching ErrNotAcquired if
// a writer holds the key or waits for it; otherwise as RLock), and holds
// nothing. On a nil *RWLock it returns ErrNilClient.
func (rw *RWLock) TryRLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return rw.acquire(ctx, true, false, opts)
}

// Lock takes the key exclusively (the write lock), waiting until no reader
// and no other writer holds it: the same lock as Client.Lock. On success,
// it returns the held lock and a nil error. On failure, it returns a nil
// *Lock and the error Client.Lock would (WithProtocol is refused with
// ErrInvalidOpts: readers only see the token lock), and holds nothing. On
// a nil *RWLock it returns ErrNilClient.
func (rw *RWLock) Lock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return rw.acquire(ctx, false, true, opts)
}

// TryLock makes exactly one attempt to take the key exclusively, as
// Client.TryLock. On success, it returns the held lock and a nil error. On
// failure, it returns a nil *Lock and an error (a *NotAcquiredError
// matching ErrNotAcquired if the key is held; ErrInvalidOpts with
// WithProtocol, as Lock), and holds nothing. On a nil *RWLock it returns
// ErrNilClient.
func (rw *RWLock) TryLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return rw.acquire(ctx, false, false, opts)
}

func (rw *RWLock) acquire(ctx context.Context, read, wait bool, opts []LockOption) (*Lock, error) {
	if rw == nil || rw.c == nil {
		return nil, ErrNilClient
	}
	if read {
		return rw.c.acquire(ctx, rw.key, wait, opts, readers{})
	}
	return rw.c.acquire(ctx, rw.key, wait, opts, writer{})
}

// readers is the kind of RWLock's read locks.
type readers struct{}

func (readers) build(_ context.Context, c *Client) (engine.Protocol, error) {
	if err := c.exclusiveOnly(); err != nil {
		return nil, err
	}
	return sharedLock{holdSet{q: c.queue, group: keyspace.SharedValue, suffix: readersSuffix}}, nil
}

// writer is the kind of RWLock's write lock: the Client's token lock,
// which must stay one (WithProtocol would put the writer where the
// readers do not look, and exclude none of them).
type writer struct{}

func (writer) build(_ context.Context, c *Client) (engine.Protocol, error) { return c.token, nil }

// sharedLock is the protocol of RWLock's readers: a shared hold whose group is
// keyspace.SharedValue (see holds.go). Writers are plain token locks: acquire.lua
// finds the key held while readers are in; a writer's release hands the
// key to a queued reader, which turns it into a read phase and lets in the
// readers queued behind it (shared_acquire.lua).
type sharedLock struct {
	holdSet
}

func (s sharedLock) Acquire(ctx context.Context, a engine.Attempt, k protocol.Keys, token string, ttl time.Duration) (engine.Grant, error) {
	c := protocol.Call{Script: scripts.SharedAcquire, Keys: []string{k.Lock, k.Fence, k.Queue, s.set(k), k.Waiters, k.Tombs},
		Args: []any{token, ttl.Milliseconds(), engine.FenceTTL(ttl).Milliseconds(), a.Mode.String(), a.Handoff(k) + "{r",
			a.Lease.Milliseconds(), a.Pickup.Milliseconds(), s.group}}
	g, err := grantOf(token, a.On().Run(ctx, c))
	return engine.Grant{Grant: g}, err
}
