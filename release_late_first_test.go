package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
)

// Unlock sends a release whose reply was lost again at once. The first
// send may still be on its way (delayed, not lost) and land after the
// second one freed the key and it changed hands: it must leave the new
// owner alone, whoever that is (the waiter the second send handed the key
// to, another Client, a later lease of the same Client), and the queue
// behind it as it was; and the release counts once.
func TestLateFirstReleaseLeavesLaterOwnersAlone(t *testing.T) {
	t.Run("handed to a waiter, the same Client queued behind it", func(t *testing.T) {
		ctx := t.Context()
		a, inj := faultyClient(t, slowRetry)
		w, rdb := newClient(t, slowRetry)
		k := key(t)
		lk, err := a.TryLock(ctx, k, dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *dlock.Lock, 1)
		go func() {
			wl, err := w.Lock(ctx, k, dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- wl
		}()
		queued(t, w)
		// The first send lands once the same Client's next Lock on k has
		// joined the queue behind the waiter (its attempt in mode "q1").
		inj.Add(faultcmd.Rule{Name: "first release lands late", Action: faultcmd.Late, HoldTimeout: time.Minute,
			Match: faultcmd.Match{Script: "release", Key: k}, Until: faultcmd.Match{Script: "acquire", Key: k, Arg: "q1"}})
		if err := lk.Unlock(ctx); err != nil {
			t.Fatalf("Unlock (its first send late, the second one ran): %v", err)
		}
		wl := <-got
		if wl == nil {
			t.FailNow()
		}
		second := make(chan error, 1)
		go func() {
			l2, err := a.Lock(ctx, k, dlock.WithTTL(10*time.Second))
			if err == nil {
				err = l2.Unlock(ctx)
			}
			second <- err
		}()
		waitLate(t, inj)
		if v := rdb.Get(ctx, k).Val(); v != wl.Token() {
			t.Fatalf("after the late release the key holds %q, want the waiter's token", v)
		}
		if n := rdb.LLen(ctx, "dlock:{"+k+"}:q").Val(); n != 1 {
			t.Fatalf("after the late release the queue holds %d waiters, want the same Client's next Lock", n)
		}
		if err := wl.Extend(ctx, 10*time.Second); err != nil {
			t.Fatalf("the waiter's Extend after the late release: %v", err)
		}
		if s := a.Stats(); s.Released != 1 || s.ReleasesLeft != 0 || s.Lost != 0 {
			t.Fatalf("Stats: Released %d, ReleasesLeft %d, Lost %d; want 1, 0, 0", s.Released, s.ReleasesLeft, s.Lost)
		}
		if err := wl.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-second:
			if err != nil {
				t.Fatalf("the same Client's next Lock, handed the key by the waiter: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the same Client's next Lock was never handed the key")
		}
	})
	t.Run("freed, another Client took it", func(t *testing.T) {
		ctx := t.Context()
		a, inj := faultyClient(t, dlock.Options{})
		b, rdb := newClient(t, dlock.Options{})
		k := key(t)
		lk, err := a.TryLock(ctx, k, dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		// The first send lands once the same Client tried k again (and
		// found it held by the other).
		inj.Add(faultcmd.Rule{Name: "first release lands late", Action: faultcmd.Late, HoldTimeout: time.Minute,
			Match: faultcmd.Match{Script: "release", Key: k}, Until: faultcmd.Match{Script: "acquire", Key: k}})
		if err := lk.Unlock(ctx); err != nil {
			t.Fatalf("Unlock (its first send late, the second one ran): %v", err)
		}
		bl, err := b.TryLock(ctx, k, dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatalf("another Client's TryLock after the Unlock: %v", err)
		}
		if _, err := a.TryLock(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("the same Client's TryLock beside the other owner = %v, want ErrNotAcquired", err)
		}
		waitLate(t, inj)
		if v := rdb.Get(ctx, k).Val(); v != bl.Token() {
			t.Fatalf("after the late release the key holds %q, want the other Client's token", v)
		}
		if err := bl.Extend(ctx, 10*time.Second); err != nil {
			t.Fatalf("the other owner's Extend after the late release: %v", err)
		}
		if s := a.Stats(); s.Released != 1 || s.ReleasesLeft != 0 || s.Lost != 0 {
			t.Fatalf("Stats: Released %d, ReleasesLeft %d, Lost %d; want 1, 0, 0", s.Released, s.ReleasesLeft, s.Lost)
		}
	})
}
