package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
)

// TestNilLockIsNotHeld: every method of a nil *Lock, or of a zero Lock,
// answers "not held" instead of panicking.
func TestNilLockIsNotHeld(t *testing.T) {
	ctx := t.Context()
	for name, lk := range map[string]*dlock.Lock{"nil": nil, "zero": {}} {
		if err := lk.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s: Unlock: %v", name, err)
		}
		if err := lk.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s: Extend: %v", name, err)
		}
		if err := lk.Err(); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s: Err: %v", name, err)
		}
		select {
		case <-lk.Done():
		default:
			t.Errorf("%s: Done not closed", name)
		}
		if lk.Key() != "" || lk.Keys() != nil || lk.Token() != "" || lk.Fence() != 0 ||
			lk.FenceOf("k") != 0 || !lk.Deadline().IsZero() {
			t.Errorf("%s: %q %q %q %d %d %v", name, lk.Key(), lk.Keys(), lk.Token(), lk.Fence(), lk.FenceOf("k"), lk.Deadline())
		}
	}
}

// TestTypedPrimitivesNilReceiver: every method of a nil *RWLock,
// *Semaphore or *Reentrant, or of one made from a nil *Client, returns
// ErrNilClient (an ErrInvalidArgument) instead of panicking.
func TestTypedPrimitivesNilReceiver(t *testing.T) {
	ctx := t.Context()
	var c *dlock.Client
	for name, rw := range map[string]*dlock.RWLock{"nil": nil, "nil client": c.RWLock("k")} {
		for method, call := range map[string]func() (*dlock.Lock, error){
			"RLock":    func() (*dlock.Lock, error) { return rw.RLock(ctx) },
			"TryRLock": func() (*dlock.Lock, error) { return rw.TryRLock(ctx) },
			"Lock":     func() (*dlock.Lock, error) { return rw.Lock(ctx) },
			"TryLock":  func() (*dlock.Lock, error) { return rw.TryLock(ctx) },
		} {
			if lk, err := call(); lk != nil || !errors.Is(err, dlock.ErrNilClient) || !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("%s RWLock.%s = %v, %v; want ErrNilClient", name, method, lk, err)
			}
		}
	}
	for name, s := range map[string]*dlock.Semaphore{"nil": nil, "nil client": c.Semaphore("k", 2)} {
		if lk, err := s.Acquire(ctx, 1); lk != nil || !errors.Is(err, dlock.ErrNilClient) {
			t.Errorf("%s Semaphore.Acquire = %v, %v; want ErrNilClient", name, lk, err)
		}
		if lk, err := s.TryAcquire(ctx, 1); lk != nil || !errors.Is(err, dlock.ErrNilClient) {
			t.Errorf("%s Semaphore.TryAcquire = %v, %v; want ErrNilClient", name, lk, err)
		}
		if err := s.SetLimit(ctx, 3); !errors.Is(err, dlock.ErrNilClient) {
			t.Errorf("%s Semaphore.SetLimit = %v; want ErrNilClient", name, err)
		}
	}
	for name, r := range map[string]*dlock.Reentrant{"nil": nil, "nil client": c.Reentrant("k")} {
		if lk, err := r.Lock(ctx, "o"); lk != nil || !errors.Is(err, dlock.ErrNilClient) {
			t.Errorf("%s Reentrant.Lock = %v, %v; want ErrNilClient", name, lk, err)
		}
		if lk, err := r.TryLock(ctx, "o"); lk != nil || !errors.Is(err, dlock.ErrNilClient) {
			t.Errorf("%s Reentrant.TryLock = %v, %v; want ErrNilClient", name, lk, err)
		}
	}
}

// TestTypedPrimitivesBadInput: the typed primitives reject bad input at
// the call with distinct errors, all matching ErrInvalidArgument.
func TestTypedPrimitivesBadInput(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	ctx := t.Context()
	long := strings.Repeat("k", dlock.MaxKeyLength+1)
	var nilCtx context.Context
	for _, tc := range []struct {
		name string
		call func() (*dlock.Lock, error)
		want error
	}{
		{"RWLock empty key", func() (*dlock.Lock, error) { return c.RWLock("").RLock(ctx) }, dlock.ErrEmptyKey},
		{"RWLock long key", func() (*dlock.Lock, error) { return c.RWLock(long).TryRLock(ctx) }, dlock.ErrKeyTooLong},
		{"RWLock nil ctx", func() (*dlock.Lock, error) { return c.RWLock("k").RLock(nilCtx) }, dlock.ErrNilContext},
		{"RWLock bad TTL", func() (*dlock.Lock, error) { return c.RWLock("k").Lock(ctx, dlock.WithTTL(0)) }, dlock.ErrInvalidTTL},
		{"Semaphore empty key", func() (*dlock.Lock, error) { return c.Semaphore("", 2).Acquire(ctx, 1) }, dlock.ErrEmptyKey},
		{"Semaphore limit 0", func() (*dlock.Lock, error) { return c.Semaphore("k", 0).TryAcquire(ctx, 1) }, dlock.ErrInvalidLimit},
		{"Semaphore n 0", func() (*dlock.Lock, error) { return c.Semaphore("k", 2).Acquire(ctx, 0) }, dlock.ErrInvalidPermits},
		{"Semaphore n > limit", func() (*dlock.Lock, error) { return c.Semaphore("k", 2).TryAcquire(ctx, 3) }, dlock.ErrInvalidPermits},
		{"Reentrant empty key", func() (*dlock.Lock, error) { return c.Reentrant("").Lock(ctx, "o") }, dlock.ErrEmptyKey},
		{"Reentrant no owner", func() (*dlock.Lock, error) { return c.Reentrant("k").TryLock(ctx, "") }, dlock.ErrInvalidOwner},
		{"Reentrant reserved owner", func() (*dlock.Lock, error) { return c.Reentrant("k").Lock(ctx, admin.SharedValue) }, dlock.ErrInvalidOwner},
	} {
		if lk, err := tc.call(); lk != nil || !errors.Is(err, tc.want) || !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v, %v; want %v", tc.name, lk, err, tc.want)
		}
	}
	if err := c.Semaphore("", 2).SetLimit(ctx, 1); !errors.Is(err, dlock.ErrEmptyKey) {
		t.Errorf("SetLimit on an empty key: %v", err)
	}
	if err := c.Semaphore("k", 2).SetLimit(ctx, -1); !errors.Is(err, dlock.ErrInvalidLimit) {
		t.Errorf("SetLimit(-1): %v", err)
	}
}
