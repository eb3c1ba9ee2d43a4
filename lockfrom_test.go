package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Do's, DoMulti's and Run's leader callback's context carries the lock
// held for them; any other context carries none.
func TestLockFrom(t *testing.T) {
	ctx := t.Context()
	c, _ := newClient(t, dlock.Options{})
	if lk, ok := dlock.LockFrom(ctx); ok || lk != nil {
		t.Fatalf("LockFrom(plain ctx) = %v, %v", lk, ok)
	}
	//lint:ignore SA1012 a nil ctx must not panic
	if lk, ok := dlock.LockFrom(nil); ok || lk != nil {
		t.Fatalf("LockFrom(nil) = %v, %v", lk, ok)
	}
	k := key(t)
	err := c.Do(ctx, k, func(ctx context.Context) error {
		lk, ok := dlock.LockFrom(ctx)
		if !ok || lk.Key() != k || lk.Fence() == 0 || lk.Err() != nil {
			t.Errorf("in Do: LockFrom = %v, %v", lk, ok)
		}
		// A nested Do's function gets its own lock.
		k2 := key(t)
		return c.Do(ctx, k2, func(ctx context.Context) error {
			if in, ok := dlock.LockFrom(ctx); !ok || in.Key() != k2 {
				t.Errorf("in the nested Do: LockFrom = %v, %v", in, ok)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{key(t), key(t)}
	err = c.DoMulti(ctx, keys, func(ctx context.Context) error {
		lk, ok := dlock.LockFrom(ctx)
		if !ok || len(lk.Keys()) != 2 || lk.Err() != nil {
			t.Errorf("in DoMulti: LockFrom = %v, %v", lk, ok)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newElection(t, c, key(t), dlock.ElectionOptions{TTL: 10 * time.Second})
	err = e.Run(ctx, "me", dlock.RunConfig{OnStartedLeading: func(ctx context.Context, l *dlock.Leadership) {
		lk, ok := dlock.LockFrom(ctx)
		switch {
		case l == nil || l.Err() != nil || l.Term() == 0 || l.Value() != "me":
			t.Errorf("leader callback got %v", l)
		case !ok || lk != l.Lock():
			t.Errorf("in Run: LockFrom = %v, %v; want the leadership's lock", lk, ok)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
}

// The lock Do's function gets is the one Do releases: once Do returns it
// has ended, so a function that kept it cannot go on writing with it.
func TestLockFromEndsWithDo(t *testing.T) {
	ctx := t.Context()
	c, _ := newClient(t, dlock.Options{})
	var kept *dlock.Lock
	if err := c.Do(ctx, key(t), func(ctx context.Context) error {
		kept, _ = dlock.LockFrom(ctx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(kept.Err(), dlock.ErrReleased) {
		t.Fatalf("after Do: Err = %v, want ErrReleased", kept.Err())
	}
}
