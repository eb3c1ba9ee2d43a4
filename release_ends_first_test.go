package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
)

// A release ends the lock before it is sent: when Redis hands the key on
// (a FIFO hand-off to a waiter), the old holder's Done is closed and its
// Err is ErrReleased already, even if the release's reply never comes
// back. Every kind of lock: the release's reply is lost (it ran), the
// waiter gets the lock, and at that moment the holder has ended.
func TestReleaseEndsLockBeforeItIsSent(t *testing.T) {
	ttl := dlock.WithTTL(time.Minute)
	for _, tc := range []struct {
		name   string
		script string
		// hold takes the lock on k with a; wait takes it with b, blocking.
		hold func(ctx context.Context, a *dlock.Client, k string) (*dlock.Lock, error)
		wait func(ctx context.Context, b *dlock.Client, k string) (*dlock.Lock, error)
	}{
		{"lock", "release",
			func(ctx context.Context, a *dlock.Client, k string) (*dlock.Lock, error) { return a.Lock(ctx, k, ttl) },
			func(ctx context.Context, b *dlock.Client, k string) (*dlock.Lock, error) { return b.Lock(ctx, k, ttl) }},
		{"read lock", "holds_release",
			func(ctx context.Context, a *dlock.Client, k string) (*dlock.Lock, error) {
				return a.RWLock(k).RLock(ctx, ttl)
			},
			func(ctx context.Context, b *dlock.Client, k string) (*dlock.Lock, error) {
				return b.RWLock(k).Lock(ctx, ttl)
			}},
		{"semaphore", "semaphore_release",
			func(ctx context.Context, a *dlock.Client, k string) (*dlock.Lock, error) {
				return a.Semaphore(k, 1).Acquire(ctx, 1, ttl)
			},
			func(ctx context.Context, b *dlock.Client, k string) (*dlock.Lock, error) {
				return b.Semaphore(k, 1).Acquire(ctx, 1, ttl)
			}},
		{"reentrant last handle", "holds_release",
			func(ctx context.Context, a *dlock.Client, k string) (*dlock.Lock, error) {
				r := a.Reentrant(k)
				first, err := r.Lock(ctx, "owner-a", ttl)
				if err != nil {
					return nil, err
				}
				last, err := r.Lock(ctx, "owner-a", ttl)
				if err != nil {
					return nil, err
				}
				return last, first.Unlock(ctx)
			},
			func(ctx context.Context, b *dlock.Client, k string) (*dlock.Lock, error) {
				return b.Reentrant(k).Lock(ctx, "owner-b", ttl)
			}},
		{"multi-key", "multi_release",
			func(ctx context.Context, a *dlock.Client, k string) (*dlock.Lock, error) {
				return a.LockMulti(ctx, []string{k + "-1", k + "-2"}, ttl)
			},
			func(ctx context.Context, b *dlock.Client, k string) (*dlock.Lock, error) {
				return b.LockMulti(ctx, []string{k + "-1", k + "-2"}, ttl)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			a, inj := faultyClient(t, dlock.Options{ReleaseTimeout: oneSend})
			b, _ := newClient(t, dlock.Options{})
			k := key(t)
			held, err := tc.hold(ctx, a, k)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				lk, err := tc.wait(ctx, b, k)
				if err == nil {
					// The moment the waiter holds the lock: the holder
					// must have ended already.
					err = endedAsReleased(held)
					_ = lk.Unlock(context.WithoutCancel(ctx))
				}
				got <- err
			}()
			waitBlocked(t, b)
			inj.Add(faultcmd.Rule{Name: "lost release reply", Action: faultcmd.DropReply, Match: faultcmd.Match{Script: tc.script}})
			if err := held.Unlock(ctx); !errors.Is(err, dlock.ErrUnavailable) {
				t.Fatalf("Unlock with its reply lost = %v, want ErrUnavailable", err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the waiter was not given the lock")
			}
			// A retried Unlock: the first release may have run, so it
			// reports no loss whatever it finds.
			if err := held.Unlock(ctx); err != nil {
				t.Fatalf("Unlock retried = %v, want nil", err)
			}
			if err := held.Err(); !errors.Is(err, dlock.ErrReleased) {
				t.Fatalf("Err after the retried Unlock = %v, want ErrReleased", err)
			}
		})
	}
}

// endedAsReleased reports how lk differs from a lock that ended by a
// release: Done closed, Err ErrReleased.
func endedAsReleased(lk *dlock.Lock) error {
	select {
	case <-lk.Done():
	default:
		return errors.New("the old holder's Done is still open while the waiter holds the lock")
	}
	if err := lk.Err(); !errors.Is(err, dlock.ErrReleased) {
		return errors.New("the old holder's Err is " + errString(err) + " while the waiter holds the lock, want ErrReleased")
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// waitBlocked waits until c has a call blocked in Lock (queued or asleep
// until its retry).
func waitBlocked(t *testing.T, c *dlock.Client) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for c.Stats().Waiting == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never blocked")
		}
		time.Sleep(time.Millisecond)
	}
}

// A resigning leader has ended (Done closed, Err ErrReleased) by the time
// its successor's Campaign returns, even when the release's reply is lost.
func TestResignEndsLeadershipBeforeSuccessorIsElected(t *testing.T) {
	ctx := t.Context()
	a, inj := faultyClient(t, dlock.Options{ReleaseTimeout: oneSend})
	b, _ := newClient(t, dlock.Options{})
	name := key(t)
	ea := a.Election(name, dlock.ElectionOptions{TTL: time.Minute})
	eb := b.Election(name, dlock.ElectionOptions{TTL: time.Minute})
	la, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lb, err := eb.Campaign(ctx, "b")
		if err == nil {
			err = endedAsReleased(la.Lock())
			_ = lb.Resign(context.WithoutCancel(ctx))
		}
		got <- err
	}()
	waitBlocked(t, b)
	inj.Add(faultcmd.Rule{Name: "lost release reply", Action: faultcmd.DropReply, Match: faultcmd.Match{Script: "release", Key: name}})
	if err := la.Resign(ctx); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Resign with its reply lost = %v, want ErrUnavailable", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the successor was not elected")
	}
	if err := la.Resign(ctx); err != nil {
		t.Fatalf("Resign retried = %v, want nil", err)
	}
}

// A lock whose deadline passed before Unlock was called, while the
// deadline timer had not run yet (the process was paused past it), was
// lost: Unlock reports the loss, even if the timer runs while the release
// is in flight. Before, the release began as if the lock were still held,
// the late timer took the unconfirmed release for done, and Unlock
// returned nil for a lock another owner may have held meanwhile.
func TestUnlockPastDeadlineReportsLoss(t *testing.T) {
	ctx := t.Context()
	release, reached := make(chan struct{}), make(chan struct{}, 1)
	undo := dlock.HoldExpiry(release, reached)
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(undo)
	c, inj := faultyClient(t, dlock.Options{})
	defer free()           // before the Client's Close, which waits for the held expiry
	rdb := srv.NewClient() // sends the marker through the same fault layer
	rdb.AddHook(inj)
	t.Cleanup(func() { _ = rdb.Close() })
	k := key(t)
	lk, err := c.TryLock(ctx, k, dlock.WithTTL(300*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	await(t, reached, "the deadline timer to fire (and be held)")
	marker := faultcmd.Match{Cmd: "ping", Arg: k}
	sent := inj.Add(faultcmd.Rule{Name: "release held", Action: faultcmd.Hold, HoldTimeout: time.Minute,
		Match: faultcmd.Match{Script: "release", Key: k}, Until: marker})
	done := make(chan error, 1)
	go func() { done <- lk.Unlock(ctx) }()
	select {
	case err = <-done: // the loss found before anything was sent
	case <-sent.FiredC():
		// The release is in flight: let the late timer run now.
		free()
		for end := time.Now().Add(20 * time.Second); c.Stats().Released == 0 && c.Stats().Lost == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("the held deadline never ran")
			}
		}
		if err := rdb.Do(ctx, "ping", k).Err(); err != nil {
			t.Fatal(err)
		}
		err = <-done
	}
	if !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrExpired) {
		t.Fatalf("Unlock past the deadline = %v, want the loss (ErrLost, ErrExpired)", err)
	}
	if !errors.Is(lk.Err(), dlock.ErrExpired) {
		t.Fatalf("Err() = %v, want ErrExpired", lk.Err())
	}
}
