package dlock

import (
	"context"
	"fmt"
	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/scripts/releases"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
)

// Semaphore is a counting semaphore on one key, made by Client.Semaphore:
// it has limit permits in all, so at most limit holders of one permit each
// hold it at a time; Acquire(ctx, n) takes n at once.
//
// The *Lock an acquire returns holds its permits with a lease renewed by
// the watchdog, like a lock: a holder whose process died gives its permits
// back after its TTL. Unlock gives them back. Waiters queue FIFO; a release
// hands the permits it frees to exactly the waiters they let in (each is
// woken by its own message), and a waiter asking for more than is free
// holds up those behind it, so large requests are not starved.
//
// All clients of a semaphore should pass the same limit; SetLimit stores a
// limit in Redis that overrides theirs until it is removed. Every grant
// draws a fencing token.
//
// The semaphore's key is a sorted set of its holders (see the package
// doc), so a plain Lock on it fails with ErrWrongType, and a semaphore on a
// plain lock's key too. A Semaphore holds no state of its own: it is safe
// for concurrent use.
type Semaphore struct {
	c     *Client
	key   string
	limit int
}

// Semaphore returns the counting semaphore on key with limit permits, 1 to
// 2^50. It makes no Redis call and returns no error: a bad key or a limit
// out of that range (ErrInvalidLimit) is reported by each acquire.
func (c *Client) Semaphore(key string, limit int) *Semaphore {
	return &Semaphore{c: c, key: key, limit: limit}
}

// Acquire takes n permits, waiting (as Client.Lock does) until they are
// free or ctx ends. On success, it returns a lock holding the n permits and
// a nil error; its Unlock gives them back. On failure, it returns a nil
// *Lock and an error, and holds nothing: ErrInvalidLimit for a limit below
// 1; ErrInvalidPermits for n below 1 or above the limit (or above a lower
// limit stored with SetLimit, instead of waiting for what can never be
// granted); otherwise what Client.Lock returns. On a nil *Semaphore it
// returns ErrNilClient.
func (s *Semaphore) Acquire(ctx context.Context, n int, opts ...LockOption) (*Lock, error) {
	return s.acquire(ctx, n, true, opts)
}

// TryAcquire makes exactly one attempt to take n permits. On success, it
// returns a lock holding them and a nil error. On failure, it returns a nil
// *Lock and an error (a *NotAcquiredError matching ErrNotAcquired if fewer
// than n are free or others wait ahead; otherwise as Acquire), and holds
// nothing. On a nil *Semaphore it returns ErrNilClient.
func (s *Semaphore) TryAcquire(ctx context.Context, n int, opts ...LockOption) (*Lock, error) {
	return s.acquire(ctx, n, false, opts)
}

func (s *Semaphore) acquire(ctx context.Context, n int, wait bool, opts []LockOption) (*Lock, error) {
	if s == nil || s.c == nil {
		return nil, ErrNilClient
	}
	return s.c.acquire(ctx, s.key, wait, opts, permits{limit: s.limit, n: n})
}

// permits is the kind of a Semaphore's acquire: n permits of limit.
type permits struct{ limit, n int }

func (p permits) build(_ context.Context, c *Client) (engine.Protocol, error) {
	if p.limit < 1 || p.limit > maxSemaphoreLimit {
		return nil, fmt.Errorf("%w: Semaphore limit %d (1 to %d)", ErrInvalidLimit, p.limit, maxSemaphoreLimit)
	}
	if p.n < 1 || p.n > p.limit {
		return nil, fmt.Errorf("%w: %d permits asked of a Semaphore of limit %d", ErrInvalidPermits, p.n, p.limit)
	}
	if err := c.exclusiveOnly(); err != nil {
		return nil, err
	}
	return semaphore{q: c.queue, limit: p.limit, permits: p.n}, nil
}

// maxSemaphoreLimit is the largest limit a Semaphore takes (and so the most
// permits one acquire asks): the scripts count permits in Lua numbers,
// which are exact integers up to 2^53.
const maxSemaphoreLimit = 1 << 50

// semaphore is the protocol of Semaphore: each holder is a member of the
// key's sorted set, scored with the end of its lease; its permit count is
// in a hash beside it (internal/lualib/semaphore.lua).
type semaphore struct {
	q              *engine.Queue // the Client's queue settings
	limit, permits int
}

// Reply of semaphore_acquire.lua: more permits asked than the limit.
const codeAboveLimit = -3

func (s semaphore) Acquire(ctx context.Context, a engine.Attempt, k protocol.Keys, token string, ttl time.Duration) (engine.Grant, error) {
	cmd := a.On().Run(ctx, protocol.Call{Script: scripts.SemaphoreAcquire,
		Keys: []string{k.Lock, auxOf(k, permitsSuffix), auxOf(k, limitSuffix), k.Fence, k.Queue, k.Waiters, k.Tombs},
		Args: []any{token, ttl.Milliseconds(), engine.FenceTTL(ttl).Milliseconds(), a.Mode.String(),
			fmt.Sprintf("%s{%d", a.Handoff(k), s.permits), a.Lease.Milliseconds(), s.permits, s.limit,
			a.Pickup.Milliseconds()}})
	if res, err := cmd.Int64Slice(); err == nil && len(res) == 2 && res[0] == codeAboveLimit {
		return engine.Grant{}, fmt.Errorf("%w: %d permits asked, limit %d", ErrInvalidPermits, s.permits, res[1])
	}
	g, err := grantOf(token, cmd)
	return engine.Grant{Grant: g}, err
}

// Queued: a semaphore's waiters queue in Redis.
func (semaphore) Queued() bool { return true }

func (s semaphore) Renew(k protocol.Keys, token string, ttl time.Duration) (protocol.Call, string) {
	return protocol.Call{Script: scripts.SemaphoreExtend, Keys: []string{k.Lock, auxOf(k, permitsSuffix), k.Fence},
		Args: []any{token, ttl.Milliseconds(), engine.FenceTTL(ttl).Milliseconds()}}, token
}

func (s semaphore) Release(k protocol.Keys, token string) protocol.Call {
	return s.release(k, token, "0")
}

// ReleaseTellsResend: semaphore_release.lua answers 1 to a second run of a
// release that gave the permits back (its tombstone), 0 (or -3, taken by
// ForceRelease) only when the permits were gone before (see
// engine.ResendTeller).
func (semaphore) ReleaseTellsResend() {}

// Leave takes a waiter out of the queue, giving back permits handed to it
// too late.
func (s semaphore) Leave(k protocol.Keys, token string) protocol.Call {
	return s.release(k, token, "1")
}

func (s semaphore) release(k protocol.Keys, token, mode string) protocol.Call {
	return releases.Semaphore(s.q.Pub(k), token, s.q.Pickup, mode, s.limit)
}
