package dlock

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

// Shared makes Lock, TryLock and Do take the key's read (shared) lock:
// any number of readers hold it together, and no writer does meanwhile.
// A writer is any exclusive lock on the same key: Lock, TryLock or Do
// without Shared (also from other programs, e.g. `dlock run KEY`).
//
// Each reader holds its own lease, renewed by the watchdog like a lock: a
// reader whose process died expires alone, after its own TTL, and never
// keeps the key for longer than that. The key holds SharedValue while read
// (with the longest reader's TTL), so SET NX clients are excluded too.
//
// Writers are not starved: a reader does not get in while a writer waits
// ahead of it in the key's FIFO queue; the readers queued behind a writer
// get in together when it releases. Every reader grant and every writer
// grant draws a fencing token from the key's counter, so a resource can
// order reads and writes by Fence.
//
// Shared cannot be combined with WithProtocol, Reentrant or Semaphore.
func Shared() LockOption {
	return func(c *lockConfig) { c.kinds |= kindShared }
}

// SharedValue is what a key holds while it is read-locked (see Shared).
// It is also reserved: it cannot be a Reentrant owner.
const SharedValue = "dlock:shared"

var (
	//go:embed scripts/shared_acquire.lua
	sharedAcquireSrc    string
	sharedAcquireScript = libScript(sharedAcquireSrc)
)

// sharedLock is the protocol of Shared: a shared hold whose group is
// SharedValue (see holds.go). Writers are plain token locks: acquire.lua
// finds the key held while readers are in; a writer's release hands the
// key to a queued reader, which turns it into a read phase and lets in the
// readers queued behind it (shared_acquire.lua).
type sharedLock struct {
	holdSet
}

func (s sharedLock) Acquire(ctx context.Context, rdb redis.UniversalClient, k Keys, token string, ttl time.Duration) (Grant, error) {
	c := Call{sharedAcquireScript, []string{k.Lock, k.Fence, k.Queue, s.set(k)},
		[]any{token, ttl.Milliseconds(), fenceTTL(ttl).Milliseconds(), s.mode.String(), s.channel + "{r",
			s.lease.Milliseconds(), s.pickup.Milliseconds(), s.group}}
	return grantOf(token, c.Run(ctx, rdb))
}
