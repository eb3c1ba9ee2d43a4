package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestMutualExclusion(t *testing.T) {
	k := key(t)
	const clients, goroutines, rounds = 4, 32, 5
	var inside, overlaps, sections atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		c, _ := newClient(t, dlock.Options{})
		for range goroutines / clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					lk, err := c.Lock(t.Context(), k, dlock.WithTTL(5*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					time.Sleep(100 * time.Microsecond)
					inside.Add(-1)
					sections.Add(1)
					if err := lk.Unlock(t.Context()); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping critical sections", overlaps.Load())
	}
	if sections.Load() != goroutines*rounds {
		t.Fatalf("%d critical sections, want %d", sections.Load(), goroutines*rounds)
	}
}

func TestTryLockHeldReportsTTL(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	k := key(t)
	lk, err := c.TryLock(t.Context(), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(t.Context())
	_, err = c.TryLock(t.Context(), k)
	var na *dlock.NotAcquiredError
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.As(err, &na) {
		t.Fatalf("got %v, want a *NotAcquiredError", err)
	}
	if na.TTL <= 50*time.Second || na.TTL > time.Minute || na.Key != k {
		t.Fatalf("NotAcquiredError = %+v", na)
	}
}

func TestReleaseAndExtendNeverTouchForeignToken(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	lk, err := c.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// Another owner takes the key behind our back.
	rdb.Set(t.Context(), k, "someone-else", time.Minute)

	err = lk.Extend(t.Context(), time.Minute)
	if !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrTaken) || !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend = %v, want ErrLost+ErrTaken", err)
	}
	if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrTaken) {
		t.Fatalf("Unlock = %v, want ErrTaken", err)
	}
	if v := rdb.Get(t.Context(), k).Val(); v != "someone-else" {
		t.Fatalf("foreign value changed to %q", v)
	}
	if ttl := rdb.PTTL(t.Context(), k).Val(); ttl < 50*time.Second {
		t.Fatalf("foreign TTL changed to %v", ttl)
	}
}

func TestUnlockIdempotent(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	lk, err := c.Lock(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := lk.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if !errors.Is(lk.Err(), dlock.ErrReleased) || !errors.Is(lk.Err(), dlock.ErrNotHeld) {
		t.Fatalf("Err after Unlock = %v", lk.Err())
	}
	select {
	case <-lk.Done():
	default:
		t.Fatal("Done not closed after Unlock")
	}
	if n := rdb.Exists(t.Context(), k).Val(); n != 0 {
		t.Fatal("key still there after Unlock")
	}
	if err := lk.Extend(t.Context(), time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend after Unlock = %v", err)
	}
}

func TestNoScriptRecovery(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	lk, err := c.Lock(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lk.Extend(t.Context(), time.Second); err != nil {
		t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
	}
	rdb.ScriptFlush(t.Context())
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock after SCRIPT FLUSH: %v", err)
	}
	rdb.ScriptFlush(t.Context())
	lk, err = c.Lock(t.Context(), k)
	if err != nil {
		t.Fatalf("Lock after SCRIPT FLUSH: %v", err)
	}
	// The watchdog's pipelined renewal recovers too.
	rdb.ScriptFlush(t.Context())
	lk2, err := c.Lock(t.Context(), key(t), dlock.WithTTL(900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rdb.ScriptFlush(t.Context())
	time.Sleep(2 * time.Second)
	if lk2.Err() != nil {
		t.Fatalf("watchdog did not recover from NOSCRIPT: %v", lk2.Err())
	}
	lk.Unlock(t.Context())
	lk2.Unlock(t.Context())
}

func waitDone(t *testing.T, lk *dlock.Lock, within time.Duration) error {
	t.Helper()
	select {
	case <-lk.Done():
		return lk.Err()
	case <-time.After(within):
		t.Fatalf("loss not signalled within %v", within)
		return nil
	}
}

func TestLossDetectedAfterExternalDel(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	lk, err := c.Lock(t.Context(), k, dlock.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(t.Context(), k)
	err = waitDone(t, lk, 3*time.Second)
	if !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrExpired) {
		t.Fatalf("Err = %v, want ErrLost+ErrExpired", err)
	}
	if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Unlock of a lost lock = %v, want ErrLost", err)
	}
	if got := c.Stats().Lost; got != 1 {
		t.Fatalf("Stats().Lost = %d", got)
	}
}

func TestLossDetectedAfterForeignSet(t *testing.T) {
	var lost atomic.Value
	c, rdb := newClient(t, dlock.Options{Hooks: dlock.Hooks{Lost: func(_ context.Context, i dlock.LostInfo) { lost.Store(i) }}})
	k := key(t)
	lk, err := c.Lock(t.Context(), k, dlock.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rdb.Set(t.Context(), k, "thief", time.Minute)
	err = waitDone(t, lk, 3*time.Second)
	if !errors.Is(err, dlock.ErrTaken) {
		t.Fatalf("Err = %v, want ErrTaken", err)
	}
	waitFor(t, "the Lost hook", func() bool { return lost.Load() != nil }) // it runs after Done closes
	info, _ := lost.Load().(dlock.LostInfo)
	if info.Key != k || !errors.Is(info.Cause, dlock.ErrTaken) || info.Fence != lk.Fence() {
		t.Fatalf("Lost hook got %+v", info)
	}
	if rdb.Get(t.Context(), k).Val() != "thief" {
		t.Fatal("the thief's value was touched")
	}
}

func TestWatchdogKeepsLockFor5xTTL(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	const ttl = 600 * time.Millisecond
	lk, err := c.Lock(t.Context(), k, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	first := lk.Deadline()
	time.Sleep(5 * ttl)
	if err := lk.Err(); err != nil {
		t.Fatalf("lost after 5×TTL: %v", err)
	}
	if v := rdb.Get(t.Context(), k).Val(); v != lk.Token() {
		t.Fatalf("key holds %q, want our token", v)
	}
	if !lk.Deadline().After(first.Add(3 * ttl)) {
		t.Fatalf("deadline did not move: %v then %v", first, lk.Deadline())
	}
	if c.Stats().Renewals < 10 {
		t.Fatalf("only %d renewals in 5×TTL at TTL/3", c.Stats().Renewals)
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestWithoutRenewalExpires(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	k := key(t)
	start := time.Now()
	lk, err := c.Lock(t.Context(), k, dlock.WithTTL(200*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	// Deadline = send time + TTL - (TTL*1% + 2ms), and start <= send time <= start+took.
	if d := lk.Deadline().Sub(start); d > 196*time.Millisecond+took || d < 196*time.Millisecond {
		t.Fatalf("deadline %v after start (call took %v)", d, took)
	}
	err = waitDone(t, lk, time.Second)
	if !errors.Is(err, dlock.ErrExpired) {
		t.Fatalf("Err = %v, want ErrExpired", err)
	}
	if time.Now().Before(lk.Deadline()) {
		t.Fatal("signalled before the deadline")
	}
	// Someone else can take it once Redis expired it.
	c2, _ := newClient(t, dlock.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	lk2, err := c2.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	lk2.Unlock(t.Context())
}

func TestLockHonoursContextDeadline(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	k := key(t)
	lk, err := c.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(t.Context())
	c2, _ := newClient(t, dlock.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c2.Lock(ctx, k)
	took := time.Since(start)
	if !errors.Is(err, dlock.ErrContextDone) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock = %v, want ErrContextDone+DeadlineExceeded", err)
	}
	// Deadline plus one round trip (generously: a shared 2-core machine).
	if took > 300*time.Millisecond+200*time.Millisecond {
		t.Fatalf("Lock returned %v after a 300ms deadline", took)
	}
	if c2.Stats().Waiting != 0 {
		t.Fatal("a waiter is still registered")
	}
}

func TestLockCancelled(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := c.Lock(ctx, key(t))
	if !errors.Is(err, dlock.ErrContextDone) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with a cancelled ctx = %v", err)
	}
}

func TestFenceStrictlyIncreasing(t *testing.T) {
	k := key(t)
	a, _ := newClient(t, dlock.Options{})
	b, rdb := newClient(t, dlock.Options{})
	var last uint64
	for i := range 1000 {
		c := a
		if i%2 == 1 {
			c = b
		}
		lk, err := c.Lock(t.Context(), k, dlock.WithoutRenewal())
		if err != nil {
			t.Fatal(err)
		}
		if lk.Fence() <= last {
			t.Fatalf("grant %d: fence %d after %d", i, lk.Fence(), last)
		}
		last = lk.Fence()
		if err := lk.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// Across expiry of the lock key and of the fence counter itself.
	lk, err := a.Lock(t.Context(), k, dlock.WithTTL(50*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, lk, time.Second)
	if lk.Fence() <= last {
		t.Fatal("fence went back")
	}
	last = lk.Fence()
	fenceKeys, _ := rdb.Keys(t.Context(), "dlock:*"+k+"*:fence").Result()
	if len(fenceKeys) != 1 {
		t.Fatalf("fence keys: %v", fenceKeys)
	}
	if ttl := rdb.PTTL(t.Context(), fenceKeys[0]).Val(); ttl <= 0 {
		t.Fatalf("fence key has no expiry (%v): storage would grow forever", ttl)
	}
	rdb.Del(t.Context(), fenceKeys[0]) // as if it had expired
	time.Sleep(100 * time.Millisecond)
	lk, err = b.Lock(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	if lk.Fence() <= last {
		t.Fatalf("fence %d after counter expiry, previous %d", lk.Fence(), last)
	}
	lk.Unlock(t.Context())
}

func TestInteropWithRawSetNX(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	// A foreign client (redis-py Lock, StackExchange.Redis LockTake...) holds it.
	if !rdb.SetNX(t.Context(), k, "foreign-token", time.Minute).Val() {
		t.Fatal("SETNX failed")
	}
	if _, err := c.TryLock(t.Context(), k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock over a foreign holder = %v", err)
	}
	// The foreign holder releases with compare-and-delete: no publish. A
	// blocked Lock still gets it, by its fallback retry.
	c2, _ := newClient(t, dlock.Options{RetryInterval: 100 * time.Millisecond})
	got := make(chan *dlock.Lock, 1)
	go func() {
		lk, err := c2.Lock(t.Context(), k)
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	time.Sleep(150 * time.Millisecond)
	rdb.Eval(t.Context(), `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`, []string{k}, "foreign-token")
	var lk *dlock.Lock
	select {
	case lk = <-got:
	case <-time.After(2 * time.Second):
		t.Fatal("waiter did not pick up a foreign release")
	}
	if lk == nil {
		t.FailNow()
	}
	// And vice versa: our lock makes the foreign SET NX fail.
	if rdb.SetNX(t.Context(), k, "foreign-token", time.Minute).Val() {
		t.Fatal("foreign SETNX succeeded over our lock")
	}
	if v := rdb.Get(t.Context(), k).Val(); v != lk.Token() {
		t.Fatalf("key holds %q", v)
	}
	if ttl := rdb.PTTL(t.Context(), k).Val(); ttl <= 0 {
		t.Fatalf("our key has no PX TTL: %v", ttl)
	}
	lk.Unlock(t.Context())
}

func TestReleaseWakesWaiter(t *testing.T) {
	// RetryInterval is far above the test's bound, so only the pub/sub
	// wake-up can make the waiter acquire in time.
	c, _ := newClient(t, dlock.Options{RetryInterval: time.Minute})
	k := key(t)
	lk, err := c.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := newClient(t, dlock.Options{RetryInterval: time.Minute})
	got := make(chan error, 1)
	go func() {
		lk2, err := c2.Lock(t.Context(), k)
		if err == nil {
			err = lk2.Unlock(t.Context())
		}
		got <- err
	}()
	for c2.Stats().Waiting == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken by the release")
	}
	if c2.Stats().Waits != 1 {
		t.Fatalf("Waits = %d", c2.Stats().Waits)
	}
}

func TestWrongType(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	rdb.HSet(t.Context(), k, "f", "v")
	if _, err := c.TryLock(t.Context(), k); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("TryLock on a hash = %v", err)
	}
	if _, err := c.Lock(t.Context(), k); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Lock on a hash = %v", err)
	}
	if rdb.Type(t.Context(), k).Val() != "hash" {
		t.Fatal("the hash was touched")
	}
}

func TestBadInput(t *testing.T) {
	if _, err := dlock.New(nil, dlock.Options{}); !errors.Is(err, dlock.ErrNilClient) || !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("New(nil) = %v", err)
	}
	var typedNil *redis.Client
	if _, err := dlock.New(typedNil, dlock.Options{}); !errors.Is(err, dlock.ErrNilClient) {
		t.Fatalf("New(typed nil) = %v", err)
	}
	for _, o := range []dlock.Options{{Prefix: "a{b"}, {TTL: -time.Second}, {TTL: time.Microsecond}, {RetryInterval: -1}} {
		if _, err := dlock.New(srv.NewClient(), o); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Fatalf("New(%+v) = %v", o, err)
		}
	}
	// A client whose every command would fail proves no Redis call is made.
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	rt := &roundTrips{}
	dead.AddHook(rt)
	c, _ := newClientOn(t, dead, dlock.Options{})
	ctx := t.Context()
	cases := []struct {
		name string
		err  error
		do   func() error
	}{
		{"empty key", dlock.ErrEmptyKey, func() error { _, err := c.Lock(ctx, ""); return err }},
		{"long key", dlock.ErrKeyTooLong, func() error { _, err := c.TryLock(ctx, strings.Repeat("k", dlock.MaxKeyLength+1)); return err }},
		{"zero ttl", dlock.ErrInvalidTTL, func() error { _, err := c.Lock(ctx, "k", dlock.WithTTL(0)); return err }},
		{"negative ttl", dlock.ErrInvalidTTL, func() error { _, err := c.Lock(ctx, "k", dlock.WithTTL(-time.Second)); return err }},
		{"sub-ms ttl", dlock.ErrInvalidTTL, func() error { _, err := c.TryLock(ctx, "k", dlock.WithTTL(time.Microsecond)); return err }},
		{"ttl within drift", dlock.ErrInvalidTTL, func() error { _, err := c.TryLock(ctx, "k", dlock.WithTTL(2*time.Millisecond)); return err }},
		//lint:ignore SA1012 testing nil ctx on purpose
		{"nil ctx", dlock.ErrNilContext, func() error { _, err := c.Lock(nil, "k"); return err }},
		{"nil ctx Do", dlock.ErrNilContext, func() error {
			//lint:ignore SA1012 the nil-context error is what is tested
			return c.Do(nil, "k", func(context.Context) error { return nil })
		}},
	}
	for _, tc := range cases {
		err := tc.do()
		if !errors.Is(err, tc.err) || !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.err)
		}
	}
	if rt.n.Load() != 0 {
		t.Fatalf("bad input made %d Redis calls", rt.n.Load())
	}
}

func TestUnreachableRedis(t *testing.T) {
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	c, _ := newClientOn(t, dead, dlock.Options{})
	_, err := c.Lock(t.Context(), "k")
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Lock on unreachable Redis = %v", err)
	}
	if c.Stats().Errors != 1 {
		t.Fatalf("Stats().Errors = %d", c.Stats().Errors)
	}
}

func TestLossWhenRedisUnreachable(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond})
	var told atomic.Int64 // wall-clock ms when the Lost hook ran
	c, _ := newClientOn(t, rdb, dlock.Options{Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) { told.Store(time.Now().UnixMilli()) }}})
	lk, err := c.Lock(t.Context(), "k", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The key's absolute expiry on the server's clock (PEXPIRETIME; the
	// server runs on this machine), read directly, not through the proxy,
	// until the loss is signalled: with the proxy blackholed, no renewal
	// moves it after that. Reading it only after the signal would race
	// the key's expiry on a busy machine.
	direct := s.NewClient()
	defer direct.Close()
	var expires atomic.Int64
	watch := make(chan struct{})
	go func() {
		defer close(watch)
		for {
			if v, err := direct.Do(context.Background(), "pexpiretime", "k").Int64(); err == nil && v > 0 {
				expires.Store(v)
			}
			select {
			case <-lk.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	p.Blackhole(true)
	err = waitDone(t, lk, 3*time.Second)
	<-watch
	if !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrUnreachable) {
		t.Fatalf("Err = %v, want ErrLost+ErrUnreachable", err)
	}
	// The deadline comes before Redis can expire the key. (The signal is
	// sent at the deadline by a timer, which a starved process runs late:
	// logged, not asserted.)
	exp := expires.Load()
	if exp <= 0 {
		t.Fatal("never saw the key's expiry")
	}
	if lk.Deadline().UnixMilli() > exp {
		t.Fatalf("deadline %d, but the key expires at %d", lk.Deadline().UnixMilli(), exp)
	}
	t.Logf("told %dms before the key expired", exp-told.Load())
	if c.Stats().RenewalFailures == 0 {
		t.Fatal("no renewal failure counted")
	}
}

func TestAmbiguousAcquireLeavesNoOrphan(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	c, _ := newClientOn(t, rdb, dlock.Options{})
	direct := s.Client(t)
	// Replies are delayed past the context: the acquire runs on Redis but
	// its reply never reaches the caller.
	p.SetLatency(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Lock(ctx, "k"); !errors.Is(err, dlock.ErrContextDone) {
		t.Fatalf("Lock = %v", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for direct.Exists(t.Context(), "k").Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("orphaned lock after an ambiguous acquire")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDoCancelsOnLoss(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	err := c.Do(t.Context(), k, func(ctx context.Context) error {
		rdb.Set(t.Context(), k, "thief", time.Minute)
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); !errors.Is(cause, dlock.ErrTaken) {
				t.Errorf("cause = %v", cause)
			}
			return ctx.Err()
		case <-time.After(3 * time.Second):
			return errors.New("fn not cancelled")
		}
	}, dlock.WithTTL(900*time.Millisecond))
	if !errors.Is(err, context.Canceled) || !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Do = %v", err)
	}
}

func TestDoReleases(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	ran := false
	if err := c.Do(t.Context(), k, func(ctx context.Context) error {
		ran = rdb.Exists(ctx, k).Val() == 1
		return nil
	}); err != nil || !ran {
		t.Fatalf("Do = %v, ran with lock = %v", err, ran)
	}
	if rdb.Exists(t.Context(), k).Val() != 0 {
		t.Fatal("Do did not release")
	}
}

func TestCloseReleasesAndStops(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	k1, k2 := key(t), key(t)
	lk1, _ := c.Lock(t.Context(), k1)
	lk2, _ := c.Lock(t.Context(), k2, dlock.WithoutRenewal())
	// A waiter blocked in Lock returns ErrClosed.
	other, _ := newClient(t, dlock.Options{})
	held, _ := other.Lock(t.Context(), "held-"+k1)
	defer held.Unlock(t.Context())
	waitErr := make(chan error, 1)
	go func() { _, err := c.Lock(t.Context(), "held-"+k1); waitErr <- err }()
	for c.Stats().Waiting == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waitErr; !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("waiter got %v", err)
	}
	if rdb.Exists(t.Context(), k1, k2).Val() != 0 {
		t.Fatal("Close left locks in Redis")
	}
	if lk1.Err() == nil || lk2.Err() == nil {
		t.Fatal("locks still report held")
	}
	if _, err := c.Lock(t.Context(), k1); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Lock after Close = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

func TestStatsAndHooks(t *testing.T) {
	var acquires, releases atomic.Int64
	c, _ := newClient(t, dlock.Options{Hooks: dlock.Hooks{
		Acquire: func(_ context.Context, i dlock.AcquireInfo) {
			if i.Err == nil && i.Fence == 0 {
				t.Error("acquire hook without fence")
			}
			acquires.Add(1)
		},
		Release: func(_ context.Context, i dlock.ReleaseInfo) {
			if i.Took <= 0 || i.Took > i.Held {
				t.Errorf("release hook: Took %v, Held %v", i.Took, i.Held)
			}
			releases.Add(1)
		},
	}})
	k := key(t)
	lk, _ := c.Lock(t.Context(), k)
	c.TryLock(t.Context(), k)
	lk.Unlock(t.Context())
	s := c.Stats()
	if s.Acquired != 1 || s.NotAcquired != 1 || s.Released != 1 || s.Held != 0 {
		t.Fatalf("Stats = %+v", s)
	}
	if acquires.Load() != 2 || releases.Load() != 1 {
		t.Fatalf("hooks: %d acquires, %d releases", acquires.Load(), releases.Load())
	}
}

func TestInspectAndList(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{Prefix: "inspect"})
	k := "jobs:" + key(t)
	lk, err := c.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	w, _ := newClient(t, dlock.Options{Prefix: "inspect"})
	go w.Lock(t.Context(), k)
	deadline := time.Now().Add(5 * time.Second)
	var info admin.Info
	for info.Queued != 1 && time.Now().Before(deadline) {
		info, err = adminOf(t, c).Inspect(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !info.Held || info.Kind != admin.KindToken || info.Value != lk.Token() || info.Fence != lk.Fence() ||
		info.Queued != 1 || info.TTL <= 50*time.Second {
		t.Fatalf("Inspect = %+v", info)
	}
	rdb.Set(t.Context(), "jobs:foreign", "someone", time.Minute)
	rdb.Set(t.Context(), "jobs:legacy", "1700000000", 0)
	var got []admin.Info
	if err := adminOf(t, c).List(t.Context(), "jobs:*", func(i admin.Info) bool { got = append(got, i); return true }); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]admin.Kind{}
	for _, i := range got {
		kinds[i.Key] = i.Kind
	}
	want := map[string]admin.Kind{k: admin.KindToken, "jobs:foreign": admin.KindForeign, "jobs:legacy": admin.KindLegacy}
	if len(kinds) != len(want) {
		t.Fatalf("List = %v, want %v (no auxiliary keys)", kinds, want)
	}
	for key, kind := range want {
		if kinds[key] != kind {
			t.Fatalf("List = %v, want %v", kinds, want)
		}
	}
	if err := adminOf(t, c).List(t.Context(), "*", func(i admin.Info) bool {
		if strings.HasPrefix(i.Key, "inspect:") {
			t.Errorf("List(*) reported an auxiliary key %q", i.Key)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	rdb.Del(t.Context(), "jobs:foreign", "jobs:legacy")
}
