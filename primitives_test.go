package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/stripe"
)

// With Barging (forced on a Ring) every primitive still waits by wake-up,
// not by its fallback timer, and never touches the queue.
func TestPrimitivesBarging(t *testing.T) {
	opts := dlock.Options{Barging: true, RetryInterval: time.Minute}
	for _, tc := range []struct {
		name         string
		hold, waiter func(ctx context.Context, c *dlock.Client, k string) (*dlock.Lock, error)
	}{
		{"shared behind writer",
			func(ctx context.Context, c *dlock.Client, k string) (*dlock.Lock, error) { return c.Lock(ctx, k) },
			func(ctx context.Context, c *dlock.Client, k string) (*dlock.Lock, error) {
				return c.RWLock(k).RLock(ctx)
			}},
		{"writer behind reader",
			func(ctx context.Context, c *dlock.Client, k string) (*dlock.Lock, error) {
				return c.RWLock(k).RLock(ctx)
			},
			func(ctx context.Context, c *dlock.Client, k string) (*dlock.Lock, error) { return c.Lock(ctx, k) }},
		{"reentrant other owner",
			func(ctx context.Context, c *dlock.Client, k string) (*dlock.Lock, error) {
				return c.Reentrant(k).Lock(ctx, "a")
			},
			func(ctx context.Context, c *dlock.Client, k string) (*dlock.Lock, error) {
				return c.Reentrant(k).Lock(ctx, "b")
			}},
		{"semaphore",
			func(ctx context.Context, c *dlock.Client, k string) (*dlock.Lock, error) {
				return c.Semaphore(k, 1).Acquire(ctx, 1)
			},
			func(ctx context.Context, c *dlock.Client, k string) (*dlock.Lock, error) {
				return c.Semaphore(k, 1).Acquire(ctx, 1)
			}},
		{"multi",
			func(ctx context.Context, c *dlock.Client, k string) (*dlock.Lock, error) { return c.Lock(ctx, k) },
			func(ctx context.Context, c *dlock.Client, k string) (*dlock.Lock, error) {
				return c.LockMulti(ctx, []string{k, k + ":z"})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rdb := newClient(t, opts)
			ctx := t.Context()
			k := key(t)
			held, err := tc.hold(ctx, c, k)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *dlock.Lock, 1)
			go func() {
				lk, err := tc.waiter(ctx, c, k)
				if err != nil {
					t.Error(err)
				}
				got <- lk
			}()
			for c.Stats().Waiting == 0 {
				time.Sleep(2 * time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
			held.Unlock(ctx)
			select {
			case lk := <-got:
				lk.Unlock(ctx)
			case <-time.After(3 * time.Second):
				t.Fatal("barging waiter not woken by the release")
			}
			if rdb.Exists(ctx, queueKey(k)).Val() != 0 {
				t.Fatal("barging waiters used the queue")
			}
		})
	}
}

// A stripe is an ordinary lock: its loss is signalled the same way.
func TestStripeLostSignal(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	ctx := t.Context()
	s := stripe.New(key(t), 4)
	lk, err := c.Lock(ctx, s.Key("sku:1"), dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, s.Key("sku:1"), "thief", time.Minute)
	if err := waitDone(t, lk, time.Second); !errors.Is(err, dlock.ErrTaken) {
		t.Fatalf("Err = %v", err)
	}
}

// DoMulti cancels fn's context, with the cause, when any key is lost.
func TestDoMultiCancelsOnLoss(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	a, b := key(t), key(t)
	err := c.DoMulti(t.Context(), []string{a, b}, func(ctx context.Context) error {
		rdb.Del(t.Context(), b)
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); !errors.Is(cause, dlock.ErrExpired) {
				t.Errorf("cause = %v", cause)
			}
			return ctx.Err()
		case <-time.After(3 * time.Second):
			return errors.New("fn not cancelled")
		}
	}, dlock.WithTTL(300*time.Millisecond))
	if !errors.Is(err, context.Canceled) || !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("DoMulti = %v", err)
	}
	if rdb.Exists(t.Context(), a).Val() != 0 {
		t.Fatal("the kept key was not released")
	}
}

// MinReplicas covers exclusive locks only: the other kinds are refused
// rather than silently granted without replica acknowledgement.
func TestPrimitivesRefuseMinReplicas(t *testing.T) {
	c, _ := newClient(t, dlock.Options{MinReplicas: 1})
	ctx := t.Context()
	for _, kind := range []primitive{readers(), reentrant("o"), permits(2, 1)} {
		if _, err := kind.Lock(ctx, c, "k"); !errors.Is(err, dlock.ErrInvalidOpts) {
			t.Fatalf("Lock = %v, want ErrInvalidOpts", err)
		}
	}
	if _, err := c.LockMulti(ctx, []string{"a", "b"}); !errors.Is(err, dlock.ErrInvalidOpts) {
		t.Fatalf("LockMulti = %v", err)
	}
}

func TestInspectSharedAndSemaphore(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	k := key(t)
	r1, err := c.RWLock(k).RLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := c.RWLock(k).RLock(t.Context())
	info, err := adminOf(t, c).Inspect(t.Context(), k)
	if err != nil || !info.Held || info.Kind != admin.KindShared || info.Holders != 2 || info.Fence == 0 {
		t.Fatalf("Inspect of a read-locked key = %+v, %v", info, err)
	}
	r1.Unlock(t.Context())
	r2.Unlock(t.Context())

	s := key(t)
	p1, err := c.Semaphore(s, 3).Acquire(t.Context(), 2)
	if err != nil {
		t.Fatal(err)
	}
	info, err = adminOf(t, c).Inspect(t.Context(), s)
	if err != nil || !info.Held || info.Kind != admin.KindSemaphore || info.Holders != 1 || info.Permits != 2 || info.TTL <= 0 {
		t.Fatalf("Inspect of a semaphore = %+v, %v", info, err)
	}
	var listed bool
	_ = adminOf(t, c).List(t.Context(), "", func(i admin.Info) bool {
		listed = listed || (i.Key == s && i.Kind == admin.KindSemaphore)
		return true
	})
	if !listed {
		t.Fatal("List did not report the semaphore")
	}
	p1.Unlock(t.Context())
	if info, _ = adminOf(t, c).Inspect(t.Context(), s); info.Held {
		t.Fatalf("semaphore still held after Unlock: %+v", info)
	}
}
