package dlock_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// A Lost hook that takes a while (it logs to a remote service, say) must
// not stop the Client's other locks from being renewed, nor its blocked
// calls' retries: the watchdog found the loss, and held up by the hook it
// renewed nothing, so every other lock expired in Redis while its holder
// still counted on it.
func TestSlowLostHookDelaysNothingElse(t *testing.T) {
	const hook = 1500 * time.Millisecond
	var inHook atomic.Bool
	release := make(chan struct{})
	c, rdb := newClient(t, dlock.Options{Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) {
		if inHook.CompareAndSwap(false, true) {
			select {
			case <-release:
			case <-time.After(hook):
			}
		}
	}}})
	defer close(release)
	ctx := t.Context()
	other, err := c.Lock(ctx, key(t), dlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Unlock(ctx)
	short, err := c.Lock(ctx, key(t), dlock.WithTTL(50*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	for !inHook.Load() {
		if time.Since(short.Deadline()) > 5*time.Second {
			t.Fatal("the short lock was never reported lost")
		}
		time.Sleep(time.Millisecond)
	}
	// The hook runs now, for up to 1.5 s: the other lock (renewed every
	// 200ms, 600ms TTL) must stay held meanwhile.
	for end := time.Now().Add(hook - 100*time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if err := other.Err(); err != nil {
			t.Fatalf("the other lock was lost while a Lost hook ran: %v", err)
		}
		if v, _ := rdb.Get(ctx, other.Key()).Result(); v != other.Token() {
			t.Fatalf("the other lock's key holds %q while it believes it holds it", v)
		}
	}
}

// The same for a loss the watchdog's renewal batch finds: the other locks
// renewed in that batch must be renewed again on time while the hook runs.
func TestSlowLostHookInRenewalBatch(t *testing.T) {
	const hook = 1500 * time.Millisecond
	var inHook atomic.Bool
	release := make(chan struct{})
	c, rdb := newClient(t, dlock.Options{Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) {
		if inHook.CompareAndSwap(false, true) {
			select {
			case <-release:
			case <-time.After(hook):
			}
		}
	}}})
	defer close(release)
	ctx := t.Context()
	const ttl = 600 * time.Millisecond
	other, err := c.Lock(ctx, key(t), dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Unlock(ctx)
	gone, err := c.Lock(ctx, key(t), dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, gone.Key()) // its next renewal finds it gone
	for !inHook.Load() {
		if time.Since(gone.Deadline()) > 5*time.Second {
			t.Fatal("the deleted lock was never reported lost")
		}
		time.Sleep(time.Millisecond)
	}
	for end := time.Now().Add(hook - 100*time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if err := other.Err(); err != nil {
			t.Fatalf("the other lock was lost while a Lost hook ran: %v", err)
		}
		if v, _ := rdb.Get(ctx, other.Key()).Result(); v != other.Token() {
			t.Fatalf("the other lock's key holds %q while it believes it holds it", v)
		}
	}
}

// A queued waiter keeps its place in the queue while a Lost hook of its
// Client runs: its lease refreshes (its retries, kept by the watchdog's
// loop) go on.
func TestSlowLostHookKeepsWaiterPlace(t *testing.T) {
	const hook = 2 * time.Second
	var inHook atomic.Bool
	release := make(chan struct{})
	opts := dlock.Options{WaiterLease: 900 * time.Millisecond}
	opts.Hooks.Lost = func(context.Context, dlock.LostInfo) {
		if inHook.CompareAndSwap(false, true) {
			select {
			case <-release:
			case <-time.After(hook):
			}
		}
	}
	c1, _ := newClient(t, opts)
	defer close(release)
	c0, rdb := newClient(t, dlock.Options{})
	c2, _ := newClient(t, dlock.Options{WaiterLease: 900 * time.Millisecond})
	ctx := t.Context()
	k := key(t)
	holder, err := c0.Lock(ctx, k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 2)
	lockAs := func(c *dlock.Client, name string) {
		lk, err := c.Lock(ctx, k)
		if err != nil {
			t.Error(err)
			got <- "error"
			return
		}
		got <- name
		time.Sleep(50 * time.Millisecond)
		_ = lk.Unlock(ctx)
	}
	go lockAs(c1, "first")
	waitQueued(t, rdb, k, 1)
	go lockAs(c2, "second")
	waitQueued(t, rdb, k, 2)
	short, err := c1.Lock(ctx, key(t), dlock.WithTTL(50*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	for !inHook.Load() {
		if time.Since(short.Deadline()) > 5*time.Second {
			t.Fatal("the short lock was never reported lost")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(hook - 300*time.Millisecond) // two of the first waiter's leases
	if testing.Verbose() {
		q := c0.KeysFor(k).Queue
		ids := rdb.LRange(ctx, q, 0, -1).Val()
		for _, id := range ids {
			t.Logf("queued %s: lease pttl %v inHook %v lost %d", id[:8], rdb.PTTL(ctx, q+":"+id).Val(), inHook.Load(), c1.Stats().Lost)
		}
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if a, b := <-got, <-got; a != "first" || b != "second" {
		t.Fatalf("granted %s then %s: the first waiter lost its place while a Lost hook ran", a, b)
	}
}

// Many locks lost at once with a slow Lost hook: their reports run on a
// bounded number of goroutines, not one per lock.
func TestManyLossesBoundedGoroutines(t *testing.T) {
	const n = 600
	var peak atomic.Int64
	var calls atomic.Int64
	release := make(chan struct{})
	c, _ := newClient(t, dlock.Options{Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) {
		calls.Add(1)
		if g := int64(runtime.NumGoroutine()); g > peak.Load() {
			peak.Store(g) // racy max: good enough for an order of magnitude
		}
		select {
		case <-release:
		case <-time.After(300 * time.Millisecond):
		}
	}}})
	defer close(release)
	base := runtime.NumGoroutine()
	locks := holdMany(t, c, key(t), n, dlock.WithTTL(1500*time.Millisecond), dlock.WithoutRenewal())
	for _, lk := range locks {
		<-lk.Done()
	}
	if calls.Load() != n {
		t.Fatalf("%d Lost calls, want %d", calls.Load(), n)
	}
	if p := peak.Load(); p > int64(base)+200 {
		t.Fatalf("%d goroutines while %d losses were reported (%d before)", p, n, base)
	}
	t.Logf("peak %d goroutines (%d before)", peak.Load(), base)
}
