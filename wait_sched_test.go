package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// The retry times of blocked calls live in one heap per Client (see
// watchdog.sleep). These tests attack it: calls cancelled at random
// moments, queue-lease refreshes due while the watchdog is busy renewing,
// and Close with calls asleep.

// Waiters cancelled at random moments (queued ones of two Clients, and
// barging ones) return ErrContextDone and leave nothing behind: no entry
// in the retry heap, no place in a queue; the rest still get every key in
// turn.
func TestWaitersCancelledAtRandom(t *testing.T) {
	const keys, perKey = 4, 40
	holder, rdb := newClient(t, dlock.Options{})
	opts := dlock.Options{WaiterLease: 150 * time.Millisecond} // a refresh every 50ms: the heap is busy
	a, _ := newClient(t, opts)
	b, _ := newClient(t, opts)
	opts.Barging = true
	barging, _ := newClient(t, opts)
	clients := []*dlock.Client{a, b, barging}
	prefix := key(t)
	var held []*dlock.Lock
	for k := range keys {
		lk, err := holder.Lock(t.Context(), fmt.Sprintf("%s:%d", prefix, k), dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lk)
	}
	var wg sync.WaitGroup
	var acquired, cancelled atomic.Int64
	for i := range keys * perKey {
		ctx, cancel := context.WithCancel(t.Context())
		keep := i%2 == 0
		if !keep {
			time.AfterFunc(time.Duration(rand.N(500))*time.Millisecond, cancel)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			lk, err := clients[i%len(clients)].Lock(ctx, fmt.Sprintf("%s:%d", prefix, i%keys))
			switch {
			case err == nil:
				acquired.Add(1)
				if err := lk.Unlock(t.Context()); err != nil {
					t.Error(err)
				}
			case errors.Is(err, dlock.ErrContextDone) && !keep:
				cancelled.Add(1)
			default:
				t.Errorf("waiter %d (cancelled: %v): %v", i, !keep, err)
			}
		}()
	}
	waitFor(t, "the cancellations", func() bool { return cancelled.Load() == keys*perKey/2 })
	if acquired.Load() != 0 {
		t.Fatalf("%d calls acquired a held key", acquired.Load())
	}
	for _, lk := range held {
		if err := lk.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if got := acquired.Load(); got != keys*perKey/2 {
		t.Fatalf("%d calls acquired, want %d", got, keys*perKey/2)
	}
	for _, c := range clients {
		if n := dlock.SleepingWaiters(c); n != 0 {
			t.Errorf("%d calls left in the retry heap", n)
		}
		if n := c.Stats().Waiting; n != 0 {
			t.Errorf("Stats().Waiting = %d after every call returned", n)
		}
	}
	for k := range keys {
		if n := rdb.LLen(t.Context(), queueKey(fmt.Sprintf("%s:%d", prefix, k))).Val(); n != 0 {
			t.Errorf("queue of key %d has %d entries left", k, n)
		}
	}
}

// Queued waiters keep their places (FIFO grants) while the watchdog that
// wakes their lease refreshes is busy renewing many locks of the same
// Client with a short TTL.
func TestWaiterLeaseRefreshedWhileWatchdogBusy(t *testing.T) {
	const held, waiters = 2000, 20
	// A lease of 900ms (refreshed every 300ms) lapses if the refreshes
	// wait behind the renewals, yet leaves a loaded CI machine room.
	c, rdb := newClient(t, dlock.Options{WaiterLease: 900 * time.Millisecond})
	holder, _ := newClient(t, dlock.Options{})
	prefix := key(t)
	for i := range held {
		if _, err := c.TryLock(t.Context(), fmt.Sprintf("%s:held:%d", prefix, i), dlock.WithTTL(600*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	k := prefix + ":contended"
	lk, err := holder.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(t.Context(), k)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := l.Unlock(t.Context()); err != nil {
				t.Error(err)
			}
		}()
		waitQueued(t, rdb, k, int64(i+1))
	}
	s0 := c.Stats()
	time.Sleep(2700 * time.Millisecond) // three leases: every waiter refreshed its place many times
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	s1 := c.Stats()
	t.Logf("renewals meanwhile: %d (failures %d, behind %d)", s1.Renewals-s0.Renewals, s1.RenewalFailures, s1.Behind)
	for i, got := range order {
		if got != i {
			t.Fatalf("grant order %v, want 0..%d: a waiter lost its place", order, waiters-1)
		}
	}
}

// Close wakes every call asleep in the retry heap, queued or barging: each
// returns ErrClosed and none is left in the heap (goleak in TestMain
// finds any goroutine left).
func TestCloseWakesSleepingWaiters(t *testing.T) {
	const n = 100
	holder, _ := newClient(t, dlock.Options{})
	queued, _ := newClient(t, dlock.Options{})
	barging, _ := newClient(t, dlock.Options{Barging: true})
	prefix := key(t)
	for i := range 10 {
		if _, err := holder.TryLock(t.Context(), fmt.Sprintf("%s:%d", prefix, i), dlock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range 2 * n {
		c := queued
		if i%2 == 1 {
			c = barging
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Lock(t.Context(), fmt.Sprintf("%s:%d", prefix, i%10))
			errs <- err
		}()
	}
	waitFor(t, "the calls to sleep", func() bool {
		return dlock.SleepingWaiters(queued) == n && dlock.SleepingWaiters(barging) == n
	})
	_ = queued.Close()
	_ = barging.Close()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("a waiting call returned %v, want ErrClosed", err)
		}
	}
	if q, b := dlock.SleepingWaiters(queued), dlock.SleepingWaiters(barging); q+b != 0 {
		t.Errorf("%d + %d calls left in the retry heaps", q, b)
	}
}
