package legacy_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/legacy"
)

// A legacy value is now+timeout+1, the same for every client locking in
// the same second with the same timeout. A release whose reply was lost
// had run: the key was deleted, and a second client took it in the same
// second, writing the same value. The holder's retried Unlock must not
// delete that client's lock; before, it did, and a third client got in
// beside the second.
func TestLostReleaseRetryKeepsOthersLock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	t0 := time.Now().Truncate(time.Second)
	p := legacy.New(legacy.Options{Unit: legacy.Seconds, Clock: func() time.Time { return t0 }})
	k := key(t)

	rdb := srv.NewClient()
	t.Cleanup(func() { _ = rdb.Close() })
	inj := faultcmd.New()
	rdb.AddHook(inj)
	// ReleaseTimeout 1ns: Unlock sends the release once (it would send one
	// that got no reply again), so the caller's own retry comes after B's.
	a, err := dlock.New(rdb, dlock.Options{ReleaseTimeout: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	lk, err := a.TryLock(ctx, k, with(p, time.Minute, dlock.WithoutRenewal())...)
	if err != nil {
		t.Fatal(err)
	}
	drop := inj.Add(faultcmd.Rule{Name: "lost release reply", Action: faultcmd.DropReply,
		Match: faultcmd.Match{Key: k, Func: isScript}})
	if err := lk.Unlock(ctx); drop.Fired() != 1 || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Unlock with its reply lost = %v (fault fired %d times), want ErrUnavailable", err, drop.Fired())
	}

	b, _ := newDlock(t, dlock.Options{})
	lkB, err := b.TryLock(ctx, k, with(p, time.Minute, dlock.WithoutRenewal())...)
	if err != nil {
		t.Fatalf("B's TryLock after A's release ran: %v", err)
	}
	if lkB.Token() != lk.Token() {
		t.Fatalf("B holds %q, A held %q: the test needs the same value", lkB.Token(), lk.Token())
	}

	if err := lk.Unlock(ctx); err != nil {
		t.Fatalf("A's retried Unlock = %v, want nil (its first release ran)", err)
	}
	admin := newRDB(t)
	if got := admin.Get(ctx, k).Val(); got != lkB.Token() {
		t.Fatalf("after A's retried Unlock the key holds %q, want B's %q", got, lkB.Token())
	}
	c, _ := newDlock(t, dlock.Options{})
	if lkC, err := c.TryLock(ctx, k, with(p, time.Minute)...); !errors.Is(err, dlock.ErrNotAcquired) {
		if lkC != nil {
			_ = lkC.Unlock(ctx)
		}
		t.Fatalf("C's TryLock while B holds the key = %v, want ErrNotAcquired", err)
	}
	if err := lkB.Unlock(ctx); err != nil {
		t.Fatalf("B's Unlock: %v", err)
	}
	if n := admin.Exists(ctx, k).Val(); n != 0 {
		t.Fatalf("the key outlives B's Unlock")
	}
}

// The same release sent twice (the Redis client re-sends a command whose
// reply a broken connection lost): the second copy, landing after another
// client took the key with the same value, answers the first copy's reply
// and leaves that client's lock alone.
func TestResentReleaseKeepsOthersLock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	t0 := time.Now().Truncate(time.Second)
	p := legacy.New(legacy.Options{Unit: legacy.Seconds, Clock: func() time.Time { return t0 }})
	k := key(t)
	a, rdb := newDlock(t, dlock.Options{})
	lk, err := a.TryLock(ctx, k, with(p, time.Minute, dlock.WithoutRenewal())...)
	if err != nil {
		t.Fatal(err)
	}
	release := p.Release(adminOn(t, rdb).KeysFor(k), lk.Token())
	if code, err := release.Run(ctx, rdb).Int64(); err != nil || code != 1 {
		t.Fatalf("the release = %d, %v; want 1", code, err)
	}

	b, _ := newDlock(t, dlock.Options{})
	lkB, err := b.TryLock(ctx, k, with(p, time.Minute, dlock.WithoutRenewal())...)
	if err != nil {
		t.Fatalf("B's TryLock after A's release: %v", err)
	}
	if lkB.Token() != lk.Token() {
		t.Fatalf("B holds %q, A held %q: the test needs the same value", lkB.Token(), lk.Token())
	}
	if code, err := release.Run(ctx, rdb).Int64(); err != nil || code != 1 {
		t.Fatalf("the release re-sent = %d, %v; want 1 (the first copy's reply)", code, err)
	}
	if got := rdb.Get(ctx, k).Val(); got != lkB.Token() {
		t.Fatalf("after the re-sent release the key holds %q, want B's %q", got, lkB.Token())
	}
	if err := lkB.Unlock(ctx); err != nil {
		t.Fatalf("B's Unlock: %v", err)
	}
	_ = lk.Unlock(ctx) // A's handle: its release ran outside the engine
}

// isScript matches script calls (EVALSHA, and EVAL after NOSCRIPT).
func isScript(c faultcmd.Command) bool { return c.Name == "evalsha" || c.Name == "eval" }
