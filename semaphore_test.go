package dlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/legacy"
	"github.com/redis/go-redis/v9"
)

func permitsKey(k string) string { return "dlock:{" + k + "}:permits" }

// N=3, 20 workers: never more than 3 inside, and 3 reached.
func TestSemaphoreMaxConcurrency(t *testing.T) {
	k := key(t)
	ctx := t.Context()
	clients := make([]*dlock.Client, 4)
	for i := range clients {
		clients[i], _ = newClient(t, dlock.Options{})
	}
	var inside maxGauge
	var done atomic.Int64
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				lk, err := clients[i%4].Semaphore(k, 3).Acquire(ctx, 1)
				if err != nil {
					t.Error(err)
					return
				}
				inside.inc()
				time.Sleep(2 * time.Millisecond)
				inside.dec()
				done.Add(1)
				if err := lk.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if inside.max.Load() != 3 || done.Load() != 100 {
		t.Fatalf("max concurrency %d (want exactly 3), %d of 100 done", inside.max.Load(), done.Load())
	}
}

// A holder that crashed gives its permit back after its TTL (and only then).
func TestSemaphoreCrashedHolderPermitReturns(t *testing.T) {
	const ttl = time.Second
	ctx := t.Context()
	c, _ := newClient(t, dlock.Options{})
	k := key(t)
	mine, err := c.Semaphore(k, 2).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Unlock(ctx)
	child, _ := startHolder(t, "semaphore", k, "", 1, 2, ttl)
	if _, err := c.Semaphore(k, 2).TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("third permit of 2: %v", err)
	}
	crashed := child.crash(t)
	lk, err := c.Semaphore(k, 2).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := time.Since(crashed)
	if d < 2*ttl/3-50*time.Millisecond || d > ttl+400*time.Millisecond {
		t.Fatalf("permit came back %v after the crash (TTL %v)", d, ttl)
	}
	t.Logf("permit back %v after the crash", d)
	lk.Unlock(ctx)
}

// A release of k permits wakes exactly the k waiters they let in; the
// others stay asleep (no retries: their timers are far off).
func TestSemaphoreWakesAsManyAsFreed(t *testing.T) {
	k := key(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	opts := dlock.Options{RetryInterval: time.Minute, WaiterLease: time.Minute}
	holder, rdb := newClient(t, opts)
	big, err := holder.Semaphore(k, 3).Acquire(ctx, 3, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var attempts atomic.Int64
	waiters := make([]*dlock.Client, 2)
	for i := range waiters {
		o := opts
		o.Hooks.Acquire = func(_ context.Context, i dlock.AcquireInfo) { attempts.Add(int64(i.Attempts)) }
		waiters[i], _ = newClient(t, o)
	}
	got := make(chan *dlock.Lock, 10)
	for i := range 10 {
		go func() {
			lk, err := waiters[i%2].Semaphore(k, 3).Acquire(ctx, 1, dlock.WithTTL(time.Minute))
			if err == nil {
				got <- lk
			}
		}()
		waitQueued(t, rdb, k, int64(i+1))
	}
	collect := func(n int) []*dlock.Lock {
		t.Helper()
		var out []*dlock.Lock
		for range n {
			select {
			case lk := <-got:
				out = append(out, lk)
			case <-time.After(3 * time.Second):
				t.Fatalf("only %d of %d waiters got in", len(out), n)
			}
		}
		select {
		case <-got:
			t.Fatalf("more than %d waiters got in", n)
		case <-time.After(200 * time.Millisecond):
		}
		return out
	}
	big.Unlock(ctx) // frees 3
	three := collect(3)
	three[0].Unlock(ctx) // frees 1
	one := collect(1)
	// Each waiter that got in made 2 attempts: the first (queued) and the
	// one its hand-off triggered; the first waiter of each Client (both
	// among the first three in) also made one try before its Client
	// subscribed its hand-off channel. Nobody else retried.
	if n := attempts.Load(); n != 2*4+2 {
		t.Fatalf("%d attempts by the 4 waiters that got in, want 10", n)
	}
	var handoffs uint64
	for _, w := range waiters {
		handoffs += w.Stats().Handoffs
	}
	if handoffs != 4 {
		t.Fatalf("%d hand-offs, want 4", handoffs)
	}
	for _, lk := range append(three[1:], one...) {
		lk.Unlock(ctx)
	}
}

// The limit changes at run time: a raise lets queued waiters in at once.
func TestSemaphoreSetLimit(t *testing.T) {
	k := key(t)
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{RetryInterval: time.Minute})
	first, _ := c.Semaphore(k, 1).Acquire(ctx, 1)
	got := make(chan *dlock.Lock, 3)
	for i := range 3 {
		go func() {
			lk, err := c.Semaphore(k, 1).Acquire(ctx, 1)
			if err != nil {
				t.Error(err)
			}
			got <- lk
		}()
		waitQueued(t, rdb, k, int64(i+1))
	}
	if err := c.Semaphore(k, 1).SetLimit(ctx, 3); err != nil {
		t.Fatal(err)
	}
	var in []*dlock.Lock
	for range 2 {
		select {
		case lk := <-got:
			in = append(in, lk)
		case <-time.After(2 * time.Second):
			t.Fatal("raise did not let waiters in")
		}
	}
	if n := rdb.LLen(ctx, queueKey(k)).Val(); n != 1 {
		t.Fatalf("%d still queued, want 1", n)
	}
	// Cut to 1: holders keep theirs; the waiter waits until 1 is left... and
	// a request above the new limit fails instead of waiting forever.
	if err := c.Semaphore(k, 1).SetLimit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Semaphore(k, 3).Acquire(ctx, 2); !errors.Is(err, dlock.ErrInvalidPermits) {
		t.Fatalf("2 permits under a limit of 1 = %v", err)
	}
	first.Unlock(ctx)
	in[0].Unlock(ctx)
	select {
	case <-got:
		t.Fatal("waiter got in with the limit still reached")
	case <-time.After(100 * time.Millisecond):
	}
	in[1].Unlock(ctx)
	select {
	case lk := <-got:
		lk.Unlock(ctx)
	case <-time.After(2 * time.Second):
		t.Fatal("waiter never got in")
	}
	if err := c.Semaphore(k, 1).SetLimit(ctx, 0); err != nil { // back to each caller's limit
		t.Fatal(err)
	}
	if rdb.Exists(ctx, "dlock:{"+k+"}:limit").Val() != 0 {
		t.Fatal("limit not removed")
	}
}

func TestSemaphorePermitsAndBadInput(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	ctx := t.Context()
	k := key(t)
	two, err := c.Semaphore(k, 3).Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Semaphore(k, 3).TryAcquire(ctx, 2); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("2 more of 3 = %v", err)
	}
	one, err := c.Semaphore(k, 3).TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rdb.HGet(ctx, permitsKey(k), "#used").Val() != "3" {
		t.Fatal("used permits not 3")
	}
	two.Unlock(ctx)
	one.Unlock(ctx)
	if rdb.Exists(ctx, k, permitsKey(k)).Val() != 0 {
		t.Fatal("semaphore keys left with no holder")
	}
	// A plain lock and a semaphore on one key: WRONGTYPE, both ways.
	sem, _ := c.Semaphore(k, 3).Acquire(ctx, 1)
	if _, err := c.TryLock(ctx, k); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("plain lock on a semaphore = %v", err)
	}
	sem.Unlock(ctx)
	plain, _ := c.Lock(ctx, k)
	if _, err := c.Semaphore(k, 3).Acquire(ctx, 1); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("semaphore on a plain lock = %v", err)
	}
	if err := c.Semaphore(k, 1).SetLimit(ctx, 2); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("SetLimit on a plain lock = %v", err)
	}
	plain.Unlock(ctx)

	legacyProto := dlock.WithProtocol(legacy.New(legacy.Options{Unit: legacy.Milliseconds}))
	for _, tc := range []struct {
		want     error
		limit, n int
		opts     []dlock.LockOption
	}{
		{dlock.ErrInvalidLimit, 0, 1, nil},
		{dlock.ErrInvalidLimit, -1, 1, nil},
		{dlock.ErrInvalidPermits, 3, 4, nil},
		{dlock.ErrInvalidPermits, 3, -1, nil},
		{dlock.ErrInvalidPermits, 3, 0, nil},
		{dlock.ErrInvalidOpts, 3, 1, []dlock.LockOption{legacyProto}}, // only exclusive locks take a protocol
	} {
		for _, try := range []bool{false, true} {
			s := c.Semaphore(k, tc.limit)
			acquire := s.Acquire
			if try {
				acquire = s.TryAcquire
			}
			if _, err := acquire(ctx, tc.n, tc.opts...); !errors.Is(err, tc.want) || !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("limit %d, %d permits, try %v: got %v, want %v", tc.limit, tc.n, try, err, tc.want)
			}
		}
	}
	if err := c.Semaphore(k, 1).SetLimit(ctx, -1); !errors.Is(err, dlock.ErrInvalidLimit) {
		t.Fatalf("SetLimit(-1) = %v", err)
	}
}

func TestSemaphoreLostSignal(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	ctx := t.Context()
	k := key(t)
	lk, _ := c.Semaphore(k, 2).Acquire(ctx, 1, dlock.WithTTL(300*time.Millisecond))
	other, _ := c.Semaphore(k, 2).Acquire(ctx, 1, dlock.WithTTL(300*time.Millisecond))
	rdb.ZAdd(ctx, k, redis.Z{Score: 1, Member: lk.Token()}) // its lease ended in Redis (a long pause)
	if err := waitDone(t, lk, time.Second); !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrExpired) {
		t.Fatalf("Err = %v, want ErrLost+ErrExpired", err)
	}
	if other.Err() != nil {
		t.Fatal("the other holder was hurt")
	}
	if rdb.HGet(ctx, permitsKey(k), "#used").Val() != "1" {
		t.Fatal("the ended lease's permit was not given back")
	}
	rdb.Del(ctx, k, permitsKey(k)) // the whole semaphore deleted
	if err := waitDone(t, other, time.Second); !errors.Is(err, dlock.ErrExpired) {
		t.Fatalf("Err = %v, want ErrExpired", err)
	}
}

// TestSemaphoreHugeLimitIsBadInput: a limit or permit count beyond what the
// scripts count exactly is refused before any Redis call as bad input
// (ErrInvalidLimit), not sent to fail there as a Redis error.
func TestSemaphoreHugeLimitIsBadInput(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	k := key(t)
	huge := int(^uint(0) >> 1)
	if _, err := c.Semaphore(k, huge).Acquire(t.Context(), huge); !errors.Is(err, dlock.ErrInvalidLimit) {
		t.Fatalf("Acquire with limit MaxInt = %v", err)
	}
	if err := c.Semaphore(k, 1).SetLimit(t.Context(), huge); !errors.Is(err, dlock.ErrInvalidLimit) {
		t.Fatalf("SetLimit(MaxInt) = %v", err)
	}
}

// TestSemaphoreBigReleaseIsCheap: releasing many permits with nobody queued
// wakes barging waiters a bounded number of times; it does not hold Redis
// for one PUBLISH per permit (a release of 2^22 permits took over a second
// of Redis time, and of 2^50 made it busy for good).
func TestSemaphoreBigReleaseIsCheap(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	k := key(t)
	lk, err := c.Semaphore(k, dlock.MaxSemaphoreLimit).Acquire(t.Context(), dlock.MaxSemaphoreLimit)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := lk.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of MaxSemaphoreLimit permits: %v", err)
	}
}
