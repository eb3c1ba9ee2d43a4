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
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/legacy"
	"github.com/redis/go-redis/v9"
)

// twoKeys returns two keys: in one slot (hash-tagged), or in two slots
// with a's slot lower (so a is taken first on the cross-slot path).
func twoKeys(t *testing.T, oneSlot bool) (a, b string) {
	base := key(t)
	if oneSlot {
		return "{" + base + "}:a", "{" + base + "}:b"
	}
	for i := 0; ; i++ {
		a, b = fmt.Sprintf("%s:a%d", base, i), fmt.Sprintf("%s:b%d", base, i)
		if admin.Slot(a) < admin.Slot(b) {
			return a, b
		}
	}
}

// auxName names an auxiliary key of k (see the package doc's key layout),
// for keys without a '}' or with a hash tag of their own.
func auxName(k, suffix string) string {
	if strings.Contains(k, "{") {
		return "dlock:#" + k + suffix
	}
	return "dlock:{" + k + "}" + suffix
}

// waitQueuedAny is waitQueued for any key.
func waitQueuedAny(t *testing.T, rdb *redis.Client, k string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.LLen(t.Context(), auxName(k, ":q")).Val() != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue of %q has %d entries, want %d", k, rdb.LLen(t.Context(), auxName(k, ":q")).Val(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// clientFor returns a Client that groups multi-key locks by slot if split
// (the Cluster path, on one server).
func clientFor(t *testing.T, split bool, opts dlock.Options) *dlock.Client {
	c, _ := newClient(t, opts)
	if split {
		dlock.SplitSlots(c)
	}
	return c
}

// Two lockers of {a,b} and {b,a}, 500 rounds each, with a single-key
// locker of b in between: no deadlock, no overlap.
func TestMultiNoDeadlock500(t *testing.T) {
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprintf("crossSlot=%v", split), func(t *testing.T) {
			a, b := twoKeys(t, !split)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			var inA, inB, overlaps atomic.Int64
			enter := func(g *atomic.Int64) {
				if g.Add(1) != 1 {
					overlaps.Add(1)
				}
			}
			var wg sync.WaitGroup
			locker := func(keys []string, rounds int) {
				defer wg.Done()
				c := clientFor(t, split, dlock.Options{})
				for range rounds {
					var lk *dlock.Lock
					var err error
					if len(keys) == 1 {
						lk, err = c.Lock(ctx, keys[0])
					} else {
						lk, err = c.LockMulti(ctx, keys)
					}
					if err != nil {
						t.Errorf("%v: %v (deadlock?)", keys, err)
						return
					}
					for _, k := range lk.Keys() {
						if k == a {
							enter(&inA)
						} else {
							enter(&inB)
						}
					}
					for _, k := range lk.Keys() {
						if k == a {
							inA.Add(-1)
						} else {
							inB.Add(-1)
						}
					}
					if err := lk.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}
			start := time.Now()
			wg.Add(3)
			go locker([]string{a, b}, 500)
			go locker([]string{b, a}, 500)
			go locker([]string{b}, 250)
			wg.Wait()
			if overlaps.Load() != 0 {
				t.Fatalf("%d overlapping holds", overlaps.Load())
			}
			t.Logf("1250 acquisitions in %v", time.Since(start))
		})
	}
}

// TryLockMulti takes all or nothing: a held key makes it take none, on
// both paths (the cross-slot one rolls back the slot it took first).
func TestMultiAllOrNothing(t *testing.T) {
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprintf("crossSlot=%v", split), func(t *testing.T) {
			c := clientFor(t, split, dlock.Options{})
			_, rdb := newClient(t, dlock.Options{})
			ctx := t.Context()
			a, b := twoKeys(t, !split)
			held, _ := c.Lock(ctx, b, dlock.WithTTL(time.Minute))
			_, err := c.TryLockMulti(ctx, []string{a, b})
			var na *dlock.NotAcquiredError
			if !errors.As(err, &na) || na.TTL < 50*time.Second {
				t.Fatalf("TryLockMulti = %v", err)
			}
			if rdb.Exists(ctx, a).Val() != 0 {
				t.Fatal("a left held by a failed TryLockMulti")
			}
			held.Unlock(ctx)
			lk, err := c.TryLockMulti(ctx, []string{b, a, b})
			if err != nil {
				t.Fatal(err)
			}
			if ks := lk.Keys(); len(ks) != 2 || ks[0] != a || ks[1] != b {
				t.Fatalf("Keys = %v", ks)
			}
			for _, k := range []string{a, b} {
				if rdb.Get(ctx, k).Val() != lk.Token() || lk.FenceOf(k) == 0 {
					t.Fatalf("%s not held, or no fence", k)
				}
			}
			if lk.FenceOf("other") != 0 || lk.Fence() != lk.FenceOf(a) {
				t.Fatal("FenceOf")
			}
			time.Sleep(50 * time.Millisecond)
			if err := lk.Extend(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			if rdb.PTTL(ctx, b).Val() < 50*time.Second {
				t.Fatal("Extend did not reach every key")
			}
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if rdb.Exists(ctx, a, b).Val() != 0 {
				t.Fatal("Unlock left keys")
			}
		})
	}
}

// A waiting LockMulti holds the keys before the one it waits for (in the
// canonical order) and renews them; it leaves nothing behind if it gives up.
func TestMultiWaitHoldsInOrderAndGivesUpClean(t *testing.T) {
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprintf("crossSlot=%v", split), func(t *testing.T) {
			const ttl = 300 * time.Millisecond
			c := clientFor(t, split, dlock.Options{})
			_, rdb := newClient(t, dlock.Options{})
			ctx := t.Context()
			a, b := twoKeys(t, !split)
			held, _ := c.Lock(ctx, b, dlock.WithTTL(time.Minute))
			got := make(chan *dlock.Lock, 1)
			go func() {
				lk, err := c.LockMulti(ctx, []string{b, a}, dlock.WithTTL(ttl))
				if err != nil {
					t.Error(err)
				}
				got <- lk
			}()
			waitQueuedAny(t, rdb, b, 1)
			time.Sleep(3 * ttl) // a must stay held: the waiter renews it
			if rdb.Exists(ctx, a).Val() != 1 {
				t.Fatal("the waiter does not hold a while it waits for b")
			}
			held.Unlock(ctx)
			select {
			case lk := <-got:
				time.Sleep(3 * ttl)
				if lk.Err() != nil {
					t.Fatal(lk.Err())
				}
				lk.Unlock(ctx)
			case <-time.After(3 * time.Second):
				t.Fatal("waiter never got both")
			}

			held, _ = c.Lock(ctx, b, dlock.WithTTL(time.Minute))
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			if _, err := c.LockMulti(wctx, []string{a, b}); !errors.Is(err, dlock.ErrContextDone) {
				t.Fatalf("LockMulti = %v", err)
			}
			deadline := time.Now().Add(3 * time.Second)
			for rdb.Exists(ctx, a).Val() != 0 || rdb.LLen(ctx, auxName(b, ":q")).Val() != 0 {
				if time.Now().After(deadline) {
					t.Fatal("a waiter that gave up left a held or queued")
				}
				time.Sleep(10 * time.Millisecond)
			}
			held.Unlock(ctx)
		})
	}
}

func TestMultiLostSignal(t *testing.T) {
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprintf("crossSlot=%v", split), func(t *testing.T) {
			c := clientFor(t, split, dlock.Options{})
			_, rdb := newClient(t, dlock.Options{})
			ctx := t.Context()
			a, b := twoKeys(t, !split)
			lk, err := c.LockMulti(ctx, []string{a, b}, dlock.WithTTL(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			rdb.Set(ctx, b, "thief", time.Minute)
			if err := waitDone(t, lk, time.Second); !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrTaken) {
				t.Fatalf("Err = %v, want ErrLost+ErrTaken", err)
			}
			// Unlock reports the loss, and still frees the key it kept.
			if err := lk.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
				t.Fatalf("Unlock = %v", err)
			}
			if rdb.Exists(ctx, a).Val() != 0 || rdb.Get(ctx, b).Val() != "thief" {
				t.Fatal("Unlock after a partial loss: a kept, or the thief's b touched")
			}
		})
	}
}

func TestMultiBadInput(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	ctx := t.Context()
	for _, tc := range []struct {
		keys []string
		opts []dlock.LockOption
		want error
	}{
		{nil, nil, dlock.ErrEmptyKey},
		{[]string{"a", ""}, nil, dlock.ErrEmptyKey},
		{[]string{"a"}, []dlock.LockOption{dlock.WithProtocol(legacy.New(legacy.Options{Unit: legacy.Milliseconds}))}, dlock.ErrInvalidOpts},
		{[]string{"a"}, []dlock.LockOption{dlock.WithTTL(0)}, dlock.ErrInvalidTTL},
	} {
		if _, err := c.LockMulti(ctx, tc.keys, tc.opts...); !errors.Is(err, tc.want) || !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("LockMulti(%q) = %v, want %v", tc.keys, err, tc.want)
		}
	}
	//lint:ignore SA1012 testing nil ctx on purpose
	if _, err := c.TryLockMulti(nil, []string{"a"}); !errors.Is(err, dlock.ErrNilContext) {
		t.Fatal(err)
	}
}

// A multi-key acquire that fails on a key of the wrong type leaves nothing
// held: not even the keys it took in the slots before that key, which a
// waiting LockMulti (queued: it keeps them while it goes on) has taken
// when it finds the wrong type. The caller still gets ErrWrongType.
func TestMultiWrongTypeLeavesNothing(t *testing.T) {
	for _, split := range []bool{false, true} {
		for _, wait := range []bool{false, true} {
			t.Run(fmt.Sprintf("crossSlot=%v/wait=%v", split, wait), func(t *testing.T) {
				c := clientFor(t, split, dlock.Options{})
				_, rdb := newClient(t, dlock.Options{})
				ctx := t.Context()
				a, b := twoKeys(t, !split)
				// A waiting Lock that gives up makes c listen for hand-offs,
				// so a waiting LockMulti queues from its first attempt.
				hk := key(t) + ":held"
				held, err := c.TryLock(ctx, hk)
				if err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				if _, err := c.Lock(wctx, hk); !errors.Is(err, dlock.ErrContextDone) {
					t.Fatalf("Lock of a held key = %v", err)
				}
				cancel()
				held.Unlock(ctx)

				rdb.RPush(ctx, b, "x") // b is taken after a
				var lk *dlock.Lock
				if wait {
					lk, err = c.LockMulti(ctx, []string{a, b}, dlock.WithTTL(time.Minute))
				} else {
					lk, err = c.TryLockMulti(ctx, []string{a, b}, dlock.WithTTL(time.Minute))
				}
				if !errors.Is(err, dlock.ErrWrongType) || lk != nil {
					t.Fatalf("LockMulti = %v, %v; want ErrWrongType", lk, err)
				}
				deadline := time.Now().Add(3 * time.Second)
				for rdb.Exists(ctx, a).Val() != 0 {
					if time.Now().After(deadline) {
						t.Fatalf("%s holds %q (TTL %v) after the failed acquire", a, rdb.Get(ctx, a).Val(), rdb.PTTL(ctx, a).Val())
					}
					time.Sleep(10 * time.Millisecond)
				}
				// And a is free for the next locker.
				lk, err = c.TryLock(ctx, a)
				if err != nil {
					t.Fatal(err)
				}
				lk.Unlock(ctx)
			})
		}
	}
}

// TestMultiWaiterKeepsPlaceAfterDefiniteRefusal: one definite (not
// ambiguous) refusal of a later slot's retry, such as READONLY during a
// failover, does not make a waiting multi-slot LockMulti give up the slots
// it holds or its places in the queues: a waiter queued after it on that
// slot is still served after it.
func TestMultiWaiterKeepsPlaceAfterDefiniteRefusal(t *testing.T) {
	w, inj := faultyClient(t, dlock.Options{WaiterLease: 600 * time.Millisecond})
	dlock.SplitSlots(w)
	h, rdb := newClient(t, dlock.Options{})
	x, _ := newClient(t, dlock.Options{})
	ctx := t.Context()
	a, b := twoKeys(t, false)
	hk := key(t) + ":held"
	held, _ := w.TryLock(ctx, hk)
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, _ = w.Lock(wctx, hk)
	cancel()
	_ = held.Unlock(ctx)

	hb, err := h.Lock(ctx, b, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	go func() {
		lk, err := w.LockMulti(ctx, []string{a, b}, dlock.WithTTL(time.Minute))
		if err == nil {
			order <- "w"
			time.Sleep(100 * time.Millisecond)
			_ = lk.Unlock(ctx)
		} else {
			order <- "w:" + err.Error()
		}
	}()
	for rdb.Exists(ctx, a).Val() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	// x queues on b after w
	go func() {
		lk, err := x.Lock(ctx, b, dlock.WithTTL(time.Minute))
		if err == nil {
			order <- "x"
			time.Sleep(100 * time.Millisecond)
			_ = lk.Unlock(ctx)
		} else {
			order <- "x:" + err.Error()
		}
	}()
	time.Sleep(100 * time.Millisecond)
	t.Logf("b's queue before the refusal: %d entries", rdb.LLen(ctx, "dlock:{"+b+"}:q").Val())
	refused := inj.Add(faultcmd.Rule{Name: "b refuses one retry", Action: faultcmd.FailBefore,
		Match: faultcmd.Match{Script: "multi_acquire", Key: b}, Err: readOnlyError{}})
	select {
	case <-refused.FiredC():
	case <-time.After(5 * time.Second):
		t.Fatal("w never retried")
	}
	time.Sleep(300 * time.Millisecond)
	t.Logf("b's queue after: %v", rdb.LRange(ctx, "dlock:{"+b+"}:q", 0, -1).Val())
	_ = hb.Unlock(ctx)
	first := <-order
	second := <-order
	t.Logf("served: %s then %s", first, second)
	if first != "w" {
		t.Errorf("w queued on b before x, but x was served first (w lost its place after one definite refusal)")
	}
}

// TestMultiFirstAttemptErrorLeavesNothing: a waiting multi-slot LockMulti
// whose first attempt takes the first slot and then gets a definite error
// (READONLY) on the next one returns that error and leaves nothing held:
// the slot it took is withdrawn, not left to its TTL.
func TestMultiFirstAttemptErrorLeavesNothing(t *testing.T) {
	w, inj := faultyClient(t, dlock.Options{})
	dlock.SplitSlots(w)
	_, rdb := newClient(t, dlock.Options{})
	ctx := t.Context()
	a, b := twoKeys(t, false)
	// Make w listen for hand-offs, so LockMulti's first attempt queues.
	hk := key(t) + ":held"
	held, err := w.TryLock(ctx, hk)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, _ = w.Lock(wctx, hk)
	cancel()
	_ = held.Unlock(ctx)

	inj.Add(faultcmd.Rule{Name: "b refuses", Action: faultcmd.FailBefore,
		Match: faultcmd.Match{Script: "multi_acquire", Key: b}, Err: readOnlyError{}})
	lk, err := w.LockMulti(ctx, []string{a, b}, dlock.WithTTL(time.Minute))
	if err == nil || lk != nil {
		t.Fatalf("LockMulti with b refusing: %v, %v", lk, err)
	}
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("LockMulti: %v, want ErrUnavailable", err)
	}
	// The withdrawal runs in the background: give it 5s, far below the TTL.
	for end := time.Now().Add(5 * time.Second); rdb.Exists(ctx, a).Val() != 0; {
		if time.Now().After(end) {
			t.Fatalf("%s is still held by the failed call (PTTL %v)", a, rdb.PTTL(ctx, a).Val())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
