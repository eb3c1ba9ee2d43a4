package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// While Lost hooks of other locks run on all 64 reporting goroutines, a
// lock whose renewal Redis refuses (its key taken) must be known lost at
// once (Err), and Unlock must return that loss without waiting for those
// hooks, also when the hooks themselves call it. The watchdog applied a
// refused renewal's reply on a reporting goroutine, holding the lock's op
// mutex while the report waited for one: Err said held until the
// deadline, Unlock waited for the other hooks, and hooks that Unlocked the
// lock waited for their own goroutines (a deadlock until they gave up).
func TestRefusedRenewalNotQueuedBehindLostHooks(t *testing.T) {
	const blockers = 64 // the reporting goroutines (see Hooks.Lost)
	var (
		victim   atomic.Pointer[dlock.Lock]
		in       atomic.Int64 // blockers' Lost hooks running
		gate     = make(chan struct{})
		mu       sync.Mutex
		problems []string
	)
	var gateOnce sync.Once
	open := func() { gateOnce.Do(func() { close(gate) }) }
	defer open()
	hook := func(ctx context.Context, i dlock.LostInfo) {
		if !strings.Contains(i.Key, ":blocker:") {
			return
		}
		in.Add(1)
		select {
		case <-gate:
		case <-time.After(20 * time.Second):
		}
		lk := victim.Load()
		err, ok := bounded(2*time.Second, func() error { return lk.Unlock(ctx) })
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !ok:
			problems = append(problems, "Unlock of the lock whose renewal was refused, from a Lost hook, did not return within 2s")
		case !errors.Is(err, dlock.ErrTaken):
			problems = append(problems, fmt.Sprintf("Unlock of the taken lock from a Lost hook: %v", err))
		}
	}
	// Renewed every 200ms, with a 10s TTL: a renewal finds the key taken
	// long before the deadline would.
	c, rdb := newClient(t, dlock.Options{RenewInterval: 200 * time.Millisecond, Hooks: dlock.Hooks{Lost: hook}})
	ctx := t.Context()
	base := key(t)
	v, err := c.Lock(ctx, base+":victim", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	victim.Store(v)
	bl := holdMany(t, c, base+":blocker", blockers, dlock.WithTTL(10*time.Second))
	for _, lk := range bl {
		rdb.Del(ctx, lk.Key())
	}
	for deadline := time.Now().Add(5 * time.Second); in.Load() < blockers; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d blockers' Lost hooks running", in.Load(), blockers)
		}
	}
	// Every reporting goroutine is in a hook: take the victim's key.
	if err := rdb.Set(ctx, v.Key(), "thief", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	stolen := time.Now()
	for v.Err() == nil && time.Since(stolen) < 3*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if err := v.Err(); !errors.Is(err, dlock.ErrTaken) {
		t.Errorf("3s after its key was taken (renewals every 200ms, deadline %v away), Err = %v, want ErrTaken",
			time.Until(v.Deadline()).Round(time.Millisecond), err)
	}
	err, ok := bounded(2*time.Second, func() error { return v.Unlock(ctx) })
	switch {
	case !ok:
		t.Error("Unlock of the lock whose renewal was refused waited for other locks' Lost hooks (over 2s)")
	case !errors.Is(err, dlock.ErrTaken):
		t.Errorf("Unlock of the taken lock: %v, want ErrTaken", err)
	}
	open()
	// The hooks' own Unlocks of the victim.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st := c.Stats(); st.Lost == blockers+1 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("not every loss reported: %+v", st)
		}
	}
	if err := waitDone(t, v, 10*time.Second); !errors.Is(err, dlock.ErrTaken) {
		t.Errorf("Err after Done: %v", err)
	}
	// Wait for the blockers' hooks to finish before reading problems.
	for _, lk := range bl {
		waitDone(t, lk, 10*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("%d of %d Lost hooks: %s", len(problems), blockers, problems[0])
	}
}

// A Renew hook that blocks (or falls far behind) must not hold up the
// losses: they were reported by the same 64 goroutines, which a blocked
// Renew hook filled, so a lock lost meanwhile never had Lost called nor
// Done closed.
func TestBlockedRenewHookDelaysNoLoss(t *testing.T) {
	const n = 2000
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	var calls, losses atomic.Int64
	c, rdb := newClient(t, dlock.Options{RenewInterval: hookRenewEvery, Hooks: dlock.Hooks{
		Renew: func(context.Context, dlock.RenewInfo) {
			calls.Add(1)
			<-release
		},
		Lost: func(context.Context, dlock.LostInfo) { losses.Add(1) },
	}})
	locks := holdMany(t, c, key(t), n, dlock.WithTTL(hookTTL)) // see hookTTL
	for deadline := time.Now().Add(10 * time.Second); c.Stats().RenewReportsDropped == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no report dropped with the Renew hook blocked: %+v", c.Stats())
		}
	}
	t.Logf("%d Renew hook calls blocked", calls.Load())
	gone := locks[n/2]
	rdb.Del(t.Context(), gone.Key())
	select {
	case <-gone.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("a lock lost while a Renew hook blocked: Done not closed after 10s (Err %v, Lost hook called %d times)", gone.Err(), losses.Load())
	}
	// Done closes as the loss is found; the Lost hook runs right after.
	waitFor(t, "the Lost hook", func() bool { return losses.Load() > 0 })
	time.Sleep(50 * time.Millisecond) // a second call would come now
	if !errors.Is(gone.Err(), dlock.ErrExpired) || losses.Load() != 1 {
		t.Errorf("Err %v, Lost hook called %d times", gone.Err(), losses.Load())
	}
}

// A Lost hook that panics (its caller recovers, as net/http recovers a
// handler's panic) must not leave the lock's Done open forever, or
// anything waiting for Done (Do's loss watch, a leader's loop) would wait
// for good. (Done closes before the hook runs.)
func TestPanickingLostHookStillClosesDone(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) {
		panic("lost hook")
	}}})
	ctx := t.Context()
	lk, err := c.Lock(ctx, key(t), dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, lk.Key())
	func() {
		defer func() {
			if r := recover(); r != "lost hook" {
				t.Errorf("recovered %v, want the hook's panic", r)
			}
		}()
		_ = lk.Unlock(ctx)
	}()
	select {
	case <-lk.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("Done not closed after the Lost hook panicked")
	}
	if err := lk.Err(); !errors.Is(err, dlock.ErrExpired) {
		t.Errorf("Err %v", err)
	}
}

// Done closes when a lock is lost, before and apart from its Lost hook:
// with every goroutine that reports losses held by slow Lost hooks of
// other locks, a lock expiring meanwhile has Done closed at its deadline
// (work bound to it, like Do's context, stops then), and its Lost hook
// runs once a reporting goroutine is free. Done used to wait for the hook.
func TestDoneClosesWhileLostHooksBusy(t *testing.T) {
	release := make(chan struct{})
	var fastLost, blocked atomic.Int64
	prefix := key(t)
	c, _ := newClient(t, dlock.Options{Hooks: dlock.Hooks{Lost: func(_ context.Context, i dlock.LostInfo) {
		if strings.HasPrefix(i.Key, prefix+":slow:") {
			blocked.Add(1)
			<-release
			return
		}
		fastLost.Add(1)
	}}})
	defer close(release)
	holdMany(t, c, prefix+":slow", 64, dlock.WithTTL(500*time.Millisecond), dlock.WithoutRenewal())
	waitFor(t, "64 Lost hooks to block", func() bool { return blocked.Load() == 64 })
	lk, err := c.Lock(t.Context(), prefix+":fast", dlock.WithTTL(300*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Done():
	case <-time.After(3 * time.Second):
		t.Fatalf("Done still open 3s after a 300ms lock's deadline while Lost hooks of other locks ran (Err %v)", lk.Err())
	}
	if !errors.Is(lk.Err(), dlock.ErrExpired) {
		t.Fatalf("Err %v", lk.Err())
	}
	if n := fastLost.Load(); n != 0 {
		t.Fatalf("the Lost hook ran %d times with every reporting goroutine busy", n)
	}
	release <- struct{}{} // frees one reporting goroutine
	waitFor(t, "the Lost hook of the lock lost meanwhile", func() bool { return fastLost.Load() == 1 })
}
