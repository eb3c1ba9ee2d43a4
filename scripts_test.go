package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// lateConfirmCase drives one kind of lock through a hand-off whose confirm
// arrives after its pickup lapsed, with another waiter queued behind.
type lateConfirmCase struct {
	name string
	keys func(k string) []string
	opts []dlock.Kind
	// handedTo reports whether the lock (the last key) is handed to token.
	handedTo func(ctx context.Context, rdb *redis.Client, d *dlock.ScriptDriver, token string) bool
}

func keyHolds(ctx context.Context, rdb *redis.Client, key, token string) bool {
	return rdb.Get(ctx, key).Val() == token
}

func lateConfirmCases() []lateConfirmCase {
	one := func(k string) []string { return []string{k} }
	return []lateConfirmCase{
		{name: "exclusive", keys: one, handedTo: func(ctx context.Context, rdb *redis.Client, d *dlock.ScriptDriver, tok string) bool {
			return keyHolds(ctx, rdb, d.Keys().Lock, tok)
		}},
		{name: "semaphore", keys: one, opts: []dlock.Kind{dlock.SemaphoreKind(1)},
			handedTo: func(ctx context.Context, rdb *redis.Client, d *dlock.ScriptDriver, tok string) bool {
				return rdb.ZScore(ctx, d.Keys().Lock, tok).Err() == nil
			}},
		{name: "multi-key", keys: func(k string) []string { return []string{k + ":a", k + ":b"} },
			handedTo: func(ctx context.Context, rdb *redis.Client, d *dlock.ScriptDriver, tok string) bool {
				return keyHolds(ctx, rdb, d.KeyB, tok)
			}},
	}
}

// TestLateConfirmRejoinsQueue: a waiter whose hand-off lapsed before its
// confirm arrived (a GC pause, a stalled CPU) is back at the head of the
// queue at once, so the next release hands it the lock although another
// waiter queued behind it meanwhile. Before, the hand-off had taken it out
// of the queue for good (its lease key outlived the hand-off, so its
// retries never rejoined): it got the lock only when the queue was empty.
func TestLateConfirmRejoinsQueue(t *testing.T) {
	const pickup = 50 * time.Millisecond
	for _, tc := range lateConfirmCases() {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			c, rdb := newClient(t, dlock.Options{PickupTimeout: pickup, WaiterLease: time.Minute})
			keys := tc.keys(key(t))
			last := keys[len(keys)-1]
			multi, err := dlock.NewScriptDriver(ctx, c, keys, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			multi.KeyB = last
			single, err := dlock.NewScriptDriver(ctx, c, []string{last}, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			waiter := single
			if len(keys) > 1 {
				waiter = multi
			}
			holder, w, x, y := dlock.NewTestToken(), dlock.NewTestToken(), dlock.NewTestToken(), dlock.NewTestToken()
			ttl := time.Minute
			mustAcquire := func(d *dlock.ScriptDriver, tok, mode string) {
				t.Helper()
				if ok, _, err := d.Acquire(ctx, tok, mode, ttl); err != nil || !ok {
					t.Fatalf("%s: acquired %v, err %v", mode, ok, err)
				}
			}
			mustWait := func(d *dlock.ScriptDriver, tok, mode string) {
				t.Helper()
				if ok, _, err := d.Acquire(ctx, tok, mode, ttl); err != nil || ok {
					t.Fatalf("%s: acquired %v, err %v; want queued", mode, ok, err)
				}
			}
			mustAcquire(single, holder, "try")
			mustWait(waiter, w, "q1")
			if _, err := single.Release(ctx, holder); err != nil {
				t.Fatal(err)
			}
			if !tc.handedTo(ctx, rdb, multi, w) {
				t.Fatal("release did not hand the lock to the queued waiter")
			}
			time.Sleep(4 * pickup)        // the waiter stalls: its pickup lapses
			mustAcquire(single, x, "try") // a newcomer gets the lapsed key
			mustWait(waiter, w, "q")      // the late confirm
			mustWait(single, y, "q1")     // steady contention: y queues behind
			if _, err := single.Release(ctx, x); err != nil {
				t.Fatal(err)
			}
			if !tc.handedTo(ctx, rdb, multi, w) {
				t.Fatal("the waiter whose hand-off lapsed was not served next: it fell out of the queue")
			}
			mustAcquire(waiter, w, "q") // confirms in time now
			// A granted waiter keeps no lease.
			if rdb.HExists(ctx, single.Keys().Waiters, w).Val() {
				t.Fatal("the granted waiter's queue lease outlives its grant")
			}
		})
	}
}

// TestLateReaderRejoinsQueue: the same for a reader let in with a batch
// (the readers queued behind the one a writer's release handed the key to)
// whose confirm comes after its pickup lapsed.
func TestLateReaderRejoinsQueue(t *testing.T) {
	const pickup = 50 * time.Millisecond
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{PickupTimeout: pickup, WaiterLease: time.Minute})
	k := key(t)
	reader, err := dlock.NewScriptDriver(ctx, c, []string{k}, dlock.ReadersKind())
	if err != nil {
		t.Fatal(err)
	}
	writer, err := dlock.NewScriptDriver(ctx, c, []string{k})
	if err != nil {
		t.Fatal(err)
	}
	w0, r1, r2, x, y := dlock.NewTestToken(), dlock.NewTestToken(), dlock.NewTestToken(), dlock.NewTestToken(), dlock.NewTestToken()
	step := func(d *dlock.ScriptDriver, tok, mode string, want bool) {
		t.Helper()
		if ok, _, err := d.Acquire(ctx, tok, mode, time.Minute); err != nil || ok != want {
			t.Fatalf("%s: acquired %v, err %v; want %v", mode, ok, err, want)
		}
	}
	step(writer, w0, "try", true)
	step(reader, r1, "q1", false)
	step(reader, r2, "q1", false)
	if _, err := writer.Release(ctx, w0); err != nil {
		t.Fatal(err)
	}
	step(reader, r1, "q", true) // a read phase; r2 is let in with it
	if rdb.ZScore(ctx, reader.Keys().Queue[:len(reader.Keys().Queue)-2]+":readers", r2).Err() != nil {
		t.Fatal("the queued reader was not let in with the batch")
	}
	step(writer, x, "q1", false)
	time.Sleep(4 * pickup) // r2 stalls: its pickup lapses
	if _, err := reader.Release(ctx, r1); err != nil {
		t.Fatal(err)
	}
	step(writer, x, "q", true)
	step(reader, r2, "q", false) // the late confirm
	step(writer, y, "q1", false)
	if _, err := writer.Release(ctx, x); err != nil {
		t.Fatal(err)
	}
	if !keyHolds(ctx, rdb, k, r2) {
		t.Fatalf("the reader whose pickup lapsed was not served next (key holds %q)", rdb.Get(ctx, k).Val())
	}
	step(reader, r2, "q", true)
}

// TestFenceAboveStaleCounter: a fence is max(counter+1, server TIME in
// µs), so a counter that went back (a replica promoted before it received
// the last grants, a restart from an old snapshot) does not make fences
// repeat while the server's clock is not behind. Before, the next fence was
// the stale counter + 1: an old fence again.
func TestFenceAboveStaleCounter(t *testing.T) {
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	lk, err := c.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	first := lk.Fence()
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The counter as a replica that missed the grant above may hold it.
	if err := rdb.Set(ctx, adminOf(t, c).KeysFor(k).Fence, first-1000, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []primitive{nil, readers(), reentrant("o")} {
		lk, err := kind.Lock(ctx, c, k)
		if err != nil {
			t.Fatal(err)
		}
		if lk.Fence() <= first {
			t.Fatalf("fence %d after %d: fences went back with the counter", lk.Fence(), first)
		}
		first = lk.Fence()
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		rdb.Set(ctx, adminOf(t, c).KeysFor(k).Fence, 7, time.Minute)
	}
}

// TestScriptErrorAfterWriteIsAmbiguous: Redis does not roll back a script
// that fails after writing, so its error reply must count as ambiguous
// (the engine then withdraws what may have been written), not as a
// definite "nothing happened".
func TestScriptErrorAfterWriteIsAmbiguous(t *testing.T) {
	ctx := t.Context()
	_, rdb := newClient(t, dlock.Options{})
	k := key(t)
	err := rdb.Eval(ctx, "redis.call('SET', KEYS[1], 'x') return redis.call('INCR', KEYS[1])", []string{k}).Err()
	if err == nil || rdb.Exists(ctx, k).Val() != 1 {
		t.Fatalf("setup: err %v", err)
	}
	if !dlock.Ambiguous(err) {
		t.Fatalf("%v: classified definite, but the script wrote before failing", err)
	}
	// Refused before running: definite.
	if err := rdb.EvalSha(ctx, "0000000000000000000000000000000000000000", []string{k}).Err(); err == nil || dlock.Ambiguous(err) {
		t.Fatalf("NOSCRIPT classified ambiguous: %v", err)
	}
}

// TestReentrantJoinsOnlyItsOwnHold: a reentrant owner joins only a
// reentrant hold of the same owner, never a key that merely holds the same
// string (another client's token, which `dlock status` shows; a legacy
// lock's predictable timestamp).
func TestReentrantJoinsOnlyItsOwnHold(t *testing.T) {
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	lk, err := c.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(ctx)
	if r, err := c.Reentrant(k).TryLock(ctx, lk.Token()); !errors.Is(err, dlock.ErrNotAcquired) {
		if r != nil {
			r.Unlock(ctx)
		}
		t.Fatalf("Reentrant(holder's token): %v; want ErrNotAcquired (two holders)", err)
	}
	legacy := key(t)
	stamp := "1796101017"
	rdb.Set(ctx, legacy, stamp, time.Minute)
	if r, err := c.Reentrant(legacy).TryLock(ctx, stamp); !errors.Is(err, dlock.ErrNotAcquired) {
		if r != nil {
			r.Unlock(ctx)
		}
		t.Fatalf("Reentrant(legacy value): %v; want ErrNotAcquired (two holders)", err)
	}
	// The owner's own hold is still joined.
	a, err := c.Reentrant(key(t)+"r").TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Reentrant(a.Key()).TryLock(ctx, "job")
	if err != nil {
		t.Fatalf("the owner's second handle: %v", err)
	}
	b.Unlock(ctx)
	a.Unlock(ctx)
}

// TestScriptsRefuseForeignTypes: a key of another type (or another
// program's value) under one of a lock's auxiliary names makes the acquire
// fail with ErrWrongType before anything is written: no lock key left held
// by nobody, the foreign key untouched. Renewals never give a foreign key
// without a TTL one.
func TestScriptsRefuseForeignTypes(t *testing.T) {
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{})
	type plant struct {
		name string
		aux  func(k protocol.Keys) string // the auxiliary name to plant on
		set  func(name string)            // what to plant
		kind primitive
	}
	str := func(name string) { rdb.Set(ctx, name, "foreign-value", 0) }
	hash := func(name string) { rdb.HSet(ctx, name, "f", "v") }
	aux := func(suffix string) func(k protocol.Keys) string {
		return func(k protocol.Keys) string { return k.Fence[:len(k.Fence)-len(":fence")] + suffix }
	}
	cases := []plant{
		{"token/fence", aux(":fence"), str, nil},
		{"token/fence-hash", aux(":fence"), hash, nil}, // MGET reads it as missing
		{"shared/fence-hash", aux(":fence"), hash, readers()},
		{"token/queue", aux(":q"), str, nil},
		{"reentrant/fence", aux(":fence"), hash, reentrant("o")},
		{"reentrant/holds", aux(":holds"), str, reentrant("o")},
		{"shared/readers", aux(":readers"), str, readers()},
		{"shared/queue", aux(":q"), hash, readers()},
		{"semaphore/limit", aux(":limit"), str, permits(2, 1)},
		{"semaphore/permits", aux(":permits"), str, permits(2, 1)},
		{"semaphore/fence", aux(":fence"), str, permits(2, 1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := key(t)
			name := tc.aux(adminOf(t, c).KeysFor(k))
			tc.set(name)
			before, _ := rdb.Dump(ctx, name).Result()
			for _, try := range []bool{true, false} {
				var err error
				var lk *dlock.Lock
				if try {
					lk, err = tc.kind.TryLock(ctx, c, k)
				} else {
					lk, err = tc.kind.Lock(ctx, c, k)
				}
				if lk != nil {
					lk.Unlock(ctx)
				}
				if !errors.Is(err, dlock.ErrWrongType) {
					t.Fatalf("try=%v: %v; want ErrWrongType", try, err)
				}
			}
			if n := rdb.Exists(ctx, k).Val(); n != 0 {
				t.Fatalf("the lock key was written (%q): held by nobody", rdb.Get(ctx, k).Val())
			}
			if after, _ := rdb.Dump(ctx, name).Result(); after != before || rdb.PTTL(ctx, name).Val() != -1 {
				t.Fatal("the foreign key was changed")
			}
		})
	}
	t.Run("token/queue, key held", func(t *testing.T) {
		// A waiter's first attempt that finds the key held reads nothing
		// of the queue before it joins: the join's push checks its type.
		k := key(t)
		holder, err := c.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		// Until its hand-off channel is subscribed, a Client's first
		// attempt is a plain try (it reads the queue): queue once behind
		// a holder, so the next Lock's first attempt joins (q1).
		k2 := key(t)
		other, err := c.Lock(ctx, k2)
		if err != nil {
			t.Fatal(err)
		}
		sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = c.Lock(sctx, k2)
		scancel()
		if !errors.Is(err, dlock.ErrContextDone) {
			t.Fatalf("waiting behind a holder: %v", err)
		}
		other.Unlock(ctx)
		if !dlock.OwnSubscribed(c) {
			t.Fatal("the Client's hand-off channel is not subscribed")
		}
		q := aux(":q")(adminOf(t, c).KeysFor(k))
		str(q)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := c.Lock(wctx, k); !errors.Is(err, dlock.ErrWrongType) {
			t.Fatalf("Lock behind a holder, foreign queue: %v; want ErrWrongType", err)
		}
		if left := rdb.Keys(ctx, q+":*").Val(); len(left) != 0 {
			t.Fatalf("the waiter left a lease behind: %v", left)
		}
		if rdb.Get(ctx, q).Val() != "foreign-value" || rdb.PTTL(ctx, q).Val() != -1 {
			t.Fatal("the foreign queue key was changed")
		}
		rdb.Del(ctx, q)
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("multi/fence", func(t *testing.T) {
		k := key(t)
		a, b := k+":a", k+":b"
		str(adminOf(t, c).KeysFor(b).Fence)
		if _, err := c.TryLockMulti(ctx, []string{a, b}); !errors.Is(err, dlock.ErrWrongType) {
			t.Fatalf("%v; want ErrWrongType", err)
		}
		if rdb.Exists(ctx, a, b).Val() != 0 {
			t.Fatal("a key of the multi-key lock was written")
		}
	})
	t.Run("SetLimit", func(t *testing.T) {
		k := key(t)
		limit := aux(":limit")(adminOf(t, c).KeysFor(k))
		str(limit)
		if err := c.Semaphore(k, 1).SetLimit(ctx, 2); !errors.Is(err, dlock.ErrWrongType) {
			t.Fatalf("SetLimit over a foreign key: %v; want ErrWrongType", err)
		}
		if rdb.Get(ctx, limit).Val() != "foreign-value" {
			t.Fatal("SetLimit overwrote a foreign key")
		}
	})
	t.Run("SetLimit version", func(t *testing.T) {
		k := key(t)
		ver := aux(":limitver")(adminOf(t, c).KeysFor(k))
		for _, foreign := range []func(string){str, func(name string) { rdb.HSet(ctx, name, "f", "v") }} {
			rdb.Del(ctx, ver)
			foreign(ver)
			if err := c.Semaphore(k, 1).SetLimit(ctx, 2); !errors.Is(err, dlock.ErrWrongType) {
				t.Fatalf("SetLimit over a foreign version key: %v; want ErrWrongType", err)
			}
			if n := rdb.Exists(ctx, aux(":limit")(adminOf(t, c).KeysFor(k))).Val(); n != 0 {
				t.Fatal("SetLimit stored a limit beside a foreign version key")
			}
		}
	})
	t.Run("renewal", func(t *testing.T) {
		k := key(t)
		lk, err := c.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Unlock(ctx)
		str(adminOf(t, c).KeysFor(k).Fence) // another program's persistent key there now
		if err := lk.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		if d := rdb.PTTL(ctx, adminOf(t, c).KeysFor(k).Fence).Val(); d != -1 {
			t.Fatalf("the renewal gave a foreign persistent key a TTL (%v)", d)
		}
	})
}

// goid is the current goroutine's id, parsed from its stack header: only
// to tell, in a test, which contender a probe pause stalled.
func goid() uint64 {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	var id uint64
	fmt.Sscanf(string(b), "goroutine %d ", &id)
	return id
}

// TestLateConfirmServedUnderContention: under steady contention (four
// Clients locking one key back to back), a waiter that stalls between its
// hand-off and its confirm for longer than PickupTimeout (a GC pause) gets
// the lock soon after, while the contention goes on. Before, it had fallen
// out of the queue and got the lock only if the queue happened to empty.
func TestLateConfirmServedUnderContention(t *testing.T) {
	const pickup = 100 * time.Millisecond
	k := key(t)
	var victim atomic.Uint64
	restore := probe.Set(func(name, key string) {
		if name == probe.BeforeConfirm && key == k && victim.CompareAndSwap(0, goid()) {
			time.Sleep(5 * pickup)
		}
	})
	defer restore()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var served atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		c, _ := newClient(t, dlock.Options{PickupTimeout: pickup, WaiterLease: time.Second})
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := goid()
			for ctx.Err() == nil && !served.Load() {
				lk, err := c.Lock(ctx, k, dlock.WithTTL(5*time.Second))
				if err != nil {
					continue
				}
				if victim.Load() == me {
					served.Store(true)
				}
				time.Sleep(5 * time.Millisecond)
				_ = lk.Unlock(context.WithoutCancel(ctx))
			}
		}()
	}
	wg.Wait()
	if victim.Load() == 0 {
		t.Fatal("no hand-off was confirmed: no contention")
	}
	// The bound is a safety bound for a loaded machine: once back at the
	// head of the queue, the waiter is served after one hold (5 ms).
	if !served.Load() {
		t.Fatal("the waiter whose hand-off lapsed was not served within 20 s of steady contention: it fell out of the queue")
	}
}

// TestCounterRefusesForeignCount: a segment's count key holding something
// that is not a count makes Take fail with ErrWrongType, writing nothing.
func TestCounterRefusesForeignCount(t *testing.T) {
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{})
	name := key(t)
	stock := c.Counter(name, 1)
	if err := stock.Set(ctx, 5); err != nil {
		t.Fatal(err)
	}
	fk := adminOf(t, c).KeysFor(name + ":0").Fence
	count := fk[:len(fk)-len(":fence")] + ":count"
	if rdb.Get(ctx, count).Val() != "5" {
		t.Fatalf("count key %q: %q", count, rdb.Get(ctx, count).Val())
	}
	rdb.Set(ctx, count, "not-a-count", 0)
	_, err := stock.Take(ctx, 1, func(context.Context, int) error { return nil })
	if !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Take: %v; want ErrWrongType", err)
	}
	if rdb.Get(ctx, count).Val() != "not-a-count" {
		t.Fatal("the foreign key was changed")
	}
}
