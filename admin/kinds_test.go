package admin_test

import (
	"context"

	"github.com/dlock-go/dlock"
)

// A primitive takes a key as one kind of lock through its typed entry point
// (Client.Lock, RWLock.RLock, Reentrant.Lock, Semaphore.Acquire), so that
// a test can run over every kind. With try it makes one attempt. The nil
// primitive is the exclusive lock.
type primitive func(ctx context.Context, c *dlock.Client, key string, try bool, opts ...dlock.LockOption) (*dlock.Lock, error)

// Lock takes key as k, waiting.
func (k primitive) Lock(ctx context.Context, c *dlock.Client, key string, opts ...dlock.LockOption) (*dlock.Lock, error) {
	if k == nil {
		return c.Lock(ctx, key, opts...)
	}
	return k(ctx, c, key, false, opts...)
}

// TryLock takes key as k in one attempt.
func (k primitive) TryLock(ctx context.Context, c *dlock.Client, key string, opts ...dlock.LockOption) (*dlock.Lock, error) {
	if k == nil {
		return c.TryLock(ctx, key, opts...)
	}
	return k(ctx, c, key, true, opts...)
}

// readers is a read lock (RWLock.RLock).
func readers() primitive {
	return func(ctx context.Context, c *dlock.Client, key string, try bool, opts ...dlock.LockOption) (*dlock.Lock, error) {
		if try {
			return c.RWLock(key).TryRLock(ctx, opts...)
		}
		return c.RWLock(key).RLock(ctx, opts...)
	}
}

// reentrant is a handle of owner's reentrant hold.
func reentrant(owner string) primitive {
	return func(ctx context.Context, c *dlock.Client, key string, try bool, opts ...dlock.LockOption) (*dlock.Lock, error) {
		if try {
			return c.Reentrant(key).TryLock(ctx, owner, opts...)
		}
		return c.Reentrant(key).Lock(ctx, owner, opts...)
	}
}

// permits is n permits of a semaphore of limit.
func permits(limit, n int) primitive {
	return func(ctx context.Context, c *dlock.Client, key string, try bool, opts ...dlock.LockOption) (*dlock.Lock, error) {
		if try {
			return c.Semaphore(key, limit).TryAcquire(ctx, n, opts...)
		}
		return c.Semaphore(key, limit).Acquire(ctx, n, opts...)
	}
}
