package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/legacy"
)

// holdsKey is the hold set of a reentrant lock on a key without braces.
func holdsKey(k string) string { return "dlock:{" + k + "}:holds" }

// Depth 10 across two processes acting as one owner; a different owner is
// blocked until the hold count is back to 0, and only then.
func TestReentrantDepthAcrossProcesses(t *testing.T) {
	const owner = "job-42"
	k := key(t)
	c, rdb := newClient(t, dlock.Options{})
	ctx := t.Context()
	var mine []*dlock.Lock
	for range 5 {
		lk, err := c.Reentrant(k).Lock(ctx, owner, dlock.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, lk)
	}
	child, childFence := startHolder(t, "reentrant", k, owner, 5, 0, 2*time.Second)
	if n := rdb.ZCard(ctx, holdsKey(k)).Val(); n != 10 {
		t.Fatalf("hold count %d, want 10", n)
	}
	for _, lk := range mine {
		if lk.Fence() != childFence {
			t.Fatalf("fences %d and %d: one hold must have one fence", lk.Fence(), childFence)
		}
	}
	// The key names the owner, with a TTL: SET NX clients are excluded.
	if o, ok := admin.ReentrantOwner(rdb.Get(ctx, k).Val()); !ok || o != owner {
		t.Fatalf("key holds %q, want the owner", rdb.Get(ctx, k).Val())
	}
	if rdb.SetNX(ctx, k, "foreign", time.Minute).Val() {
		t.Fatal("SET NX succeeded over a reentrant hold")
	}

	other, _ := newClient(t, dlock.Options{})
	if _, err := other.Reentrant(k).TryLock(ctx, "job-7"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("other owner's TryLock = %v", err)
	}
	got := make(chan *dlock.Lock, 1)
	go func() {
		lk, err := other.Reentrant(k).Lock(ctx, "job-7")
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	notYet := func(left int) {
		t.Helper()
		select {
		case <-got:
			t.Fatalf("other owner got the lock with %d handles left", left)
		case <-time.After(30 * time.Millisecond):
		}
		if n := rdb.ZCard(ctx, holdsKey(k)).Val(); n != int64(left) {
			t.Fatalf("hold count %d, want %d", n, left)
		}
	}
	// Released in an interleaved order: the count, not the process, matters.
	left := 10
	for i := range 5 {
		if err := mine[i].Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		left--
		notYet(left)
		if i < 4 {
			if n := child.release(t); n != 4-i {
				t.Fatalf("child holds %d", n)
			}
			left--
			notYet(left)
		}
	}
	released := time.Now()
	if n := child.release(t); n != 0 {
		t.Fatalf("child holds %d", n)
	}
	select {
	case lk := <-got:
		if d := time.Since(released); d > time.Second {
			t.Fatalf("other owner waited %v after the count reached 0", d)
		}
		if lk.Fence() <= childFence {
			t.Fatalf("new hold's fence %d not above %d", lk.Fence(), childFence)
		}
		lk.Unlock(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("other owner never got the lock")
	}
}

func TestReentrantContextOwner(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	k := key(t)
	ctx := dlock.ContextWithOwner(t.Context(), "")
	depth := 0
	// hold takes the key as the context's owner and calls enter under it.
	var enter func(ctx context.Context) error
	hold := func(ctx context.Context) error {
		lk, err := c.Reentrant(k).Lock(ctx, "")
		if err != nil {
			return err
		}
		return errors.Join(enter(ctx), lk.Unlock(ctx))
	}
	enter = func(ctx context.Context) error {
		depth++
		if depth == 5 {
			// Another owner (another request) is excluded meanwhile.
			octx := dlock.ContextWithOwner(t.Context(), "")
			if _, err := c.Reentrant(k).TryLock(octx, ""); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("another owner's TryLock = %v", err)
			}
			return nil
		}
		return hold(ctx)
	}
	if err := hold(ctx); err != nil {
		t.Fatal(err)
	}
	if depth != 5 {
		t.Fatalf("depth %d", depth)
	}
	// Without an owner: refused before any Redis call.
	if _, err := c.Reentrant(k).Lock(t.Context(), ""); !errors.Is(err, dlock.ErrInvalidOwner) || !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("Reentrant without owner = %v", err)
	}
	if _, err := c.Reentrant(k).Lock(t.Context(), admin.SharedValue); !errors.Is(err, dlock.ErrInvalidOwner) {
		t.Fatalf("reserved owner = %v", err)
	}
	// Only exclusive locks take another protocol.
	p := legacy.New(legacy.Options{Unit: legacy.Milliseconds})
	if _, err := c.Reentrant(k).Lock(t.Context(), "a", dlock.WithProtocol(p)); !errors.Is(err, dlock.ErrInvalidOpts) {
		t.Fatalf("Reentrant with WithProtocol = %v", err)
	}
}

// Renewal covers the whole hold: each handle is renewed; a handle that
// stops renewing (its process died) expires alone, and does not keep the
// key once the others are released.
func TestReentrantRenewalAndCrashedHandle(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	ctx := t.Context()
	const ttl = 300 * time.Millisecond
	a, _ := c.Reentrant(k).Lock(ctx, "o", dlock.WithTTL(ttl))
	b, _ := c.Reentrant(k).Lock(ctx, "o", dlock.WithTTL(ttl))
	dead, err := c.Reentrant(k).Lock(ctx, "o", dlock.WithTTL(ttl), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * ttl)
	if a.Err() != nil || b.Err() != nil {
		t.Fatalf("renewed handles lost: %v, %v", a.Err(), b.Err())
	}
	if err := dead.Err(); !errors.Is(err, dlock.ErrExpired) {
		t.Fatalf("unrenewed handle: %v, want ErrExpired", err)
	}
	if rdb.Get(ctx, k).Val() != admin.ReentrantPrefix+"o" {
		t.Fatal("hold gone")
	}
	a.Unlock(ctx)
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, k, holdsKey(k)).Val() != 0 {
		t.Fatal("key kept after the last live handle was released")
	}
	if err := dead.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Unlock of the expired handle = %v", err)
	}
}

func TestReentrantLostSignal(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		steal func(k string)
		cause error
	}{
		{"deleted", func(k string) { rdb.Del(ctx, k) }, dlock.ErrExpired},
		{"taken", func(k string) { rdb.Set(ctx, k, "thief", time.Minute) }, dlock.ErrTaken},
		{"handle removed", func(k string) { rdb.Del(ctx, holdsKey(k)) }, dlock.ErrExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := key(t)
			// A TTL long enough that the first renewal's reply comes back
			// before the deadline on a busy machine: the cause is then
			// what the renewal found, not "no reply in time".
			a, _ := c.Reentrant(k).Lock(ctx, "o", dlock.WithTTL(time.Second))
			b, _ := c.Reentrant(k).Lock(ctx, "o", dlock.WithTTL(time.Second))
			tc.steal(k)
			for _, lk := range []*dlock.Lock{a, b} {
				if err := waitDone(t, lk, 3*time.Second); !errors.Is(err, dlock.ErrLost) || !errors.Is(err, tc.cause) {
					t.Fatalf("Err = %v, want ErrLost and %v", err, tc.cause)
				}
			}
			rdb.Del(ctx, k)
		})
	}
	// A handle of an ended hold does not count in the owner's next hold.
	k := key(t)
	old, _ := c.Reentrant(k).Lock(ctx, "o", dlock.WithoutRenewal(), dlock.WithTTL(100*time.Millisecond))
	waitDone(t, old, time.Second)
	time.Sleep(20 * time.Millisecond)
	cur, err := c.Reentrant(k).Lock(ctx, "o")
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("stale handle's Unlock = %v", err)
	}
	if rdb.ZCard(ctx, holdsKey(k)).Val() != 1 || cur.Err() != nil {
		t.Fatal("a stale handle's Unlock touched the new hold")
	}
	cur.Unlock(ctx)
}

// A reentrant lock and plain locks on one key exclude each other, and
// hand the key over through the same queue.
func TestReentrantInteropWithPlainLock(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{RetryInterval: time.Minute})
	ctx := t.Context()
	k := key(t)
	plain, _ := c.Lock(ctx, k)
	got := make(chan *dlock.Lock, 1)
	go func() {
		lk, err := c.Reentrant(k).Lock(ctx, "o")
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	waitQueued(t, rdb, k, 1)
	plain.Unlock(ctx) // hands the key to the reentrant waiter
	var r *dlock.Lock
	select {
	case r = <-got:
	case <-time.After(3 * time.Second):
		t.Fatal("reentrant waiter not handed the key")
	}
	if rdb.Get(ctx, k).Val() != admin.ReentrantPrefix+"o" {
		t.Fatal("hand-off not turned into the owner's hold")
	}
	go func() {
		lk, err := c.Lock(ctx, k)
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	waitQueued(t, rdb, k, 1)
	r.Unlock(ctx)
	select {
	case lk := <-got:
		if rdb.Get(ctx, k).Val() != lk.Token() {
			t.Fatal("plain waiter not handed the key")
		}
		lk.Unlock(ctx)
	case <-time.After(3 * time.Second):
		t.Fatal("plain waiter not handed the key")
	}
}

// TestReentrantDoesNotJoinAnAbandonedHandle: a TryLock whose reply was lost
// may have started the owner's hold; its handle is withdrawn in the
// background. The owner's next TryLock must not join that hold (its fence,
// and a hold that outlives the owner's last Unlock until the withdrawal
// lands): it waits for the withdrawal, then starts a hold of its own.
func TestReentrantDoesNotJoinAnAbandonedHandle(t *testing.T) {
	rdb := srv.NewClient()
	inj := faultcmd.New()
	rdb.AddHook(inj)
	c, _ := newClientOn(t, rdb, dlock.Options{})
	k := key(t)
	r := c.Reentrant(k)
	lost := inj.Add(faultcmd.Rule{Name: "lost grant", Action: faultcmd.DropReply, Times: 1,
		Match: faultcmd.Match{Script: "reentrant_acquire", Key: k}})
	late := inj.Add(faultcmd.Rule{Name: "late withdrawal", Action: faultcmd.Delay, Times: 1,
		Delay: 300 * time.Millisecond, Match: faultcmd.Match{Script: "holds_release", Key: k}})
	if _, err := r.TryLock(t.Context(), "job", dlock.WithTTL(time.Minute)); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryLock with its reply lost: %v, want ErrUnavailable", err)
	}
	if lost.Fired() != 1 {
		t.Fatal("the reply was not dropped")
	}
	ghost, err := srv.NewClient().Get(t.Context(), k).Result()
	if err != nil {
		t.Fatalf("the lost TryLock left no hold: %v", err)
	}
	lk, err := r.TryLock(t.Context(), "job", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if late.Fired() != 1 {
		t.Fatal("the withdrawal was not delayed")
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The owner's only handle is released: the key is free at once.
	if n, err := srv.NewClient().Exists(t.Context(), k).Result(); err != nil || n != 0 {
		t.Fatalf("after the owner's last Unlock the key (%q) still exists (%d, %v): the abandoned handle kept the hold", ghost, n, err)
	}
	other, err := c.Reentrant(k).TryLock(t.Context(), "other")
	if err != nil {
		t.Fatalf("another owner after the last Unlock: %v", err)
	}
	_ = other.Unlock(t.Context())
}
