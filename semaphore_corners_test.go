package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/redis/go-redis/v9"
)

// semTokens returns n distinct tokens (22 base64url characters) for k.
func semTokens(k string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%-22.22s", fmt.Sprintf("t%dx%d", keySeq.Add(1), i))
		out[i] = strings.ReplaceAll(out[i], " ", "A")
	}
	return out
}

// inUse is the permits in use of the semaphore k, as Inspect reports them.
func inUse(t *testing.T, c *dlock.Client, k string) int64 {
	t.Helper()
	info, err := adminOf(t, c).Inspect(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	return info.Permits
}

// semFullAboveLimit: a semaphore whose callers pass limit 2 has 4 holders
// (a limit of 4 was stored, then removed) and two of its callers queued
// behind them. The waiters' Client retries only after a minute: a waiter
// that gets in sooner was woken by a release.
func semFullAboveLimit(t *testing.T, admin *dlock.Client, k string) (holders []*dlock.Lock, got chan *dlock.Lock) {
	t.Helper()
	ctx := t.Context()
	sem := admin.Semaphore(k, 2)
	if err := sem.SetLimit(ctx, 4); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		lk, err := sem.TryAcquire(ctx, 1, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lk.Unlock(context.Background()) })
		holders = append(holders, lk)
	}
	if err := sem.SetLimit(ctx, 0); err != nil {
		t.Fatal(err)
	}
	waiters, rdb := newClient(t, dlock.Options{RetryInterval: time.Minute, WaiterLease: time.Minute})
	got = make(chan *dlock.Lock, 2)
	for i := range 2 {
		go func() {
			lk, err := waiters.Semaphore(k, 2).Acquire(ctx, 1, dlock.WithTTL(time.Minute))
			if err != nil {
				if ctx.Err() == nil {
					t.Error(err)
				}
				return
			}
			t.Cleanup(func() { _ = lk.Unlock(context.Background()) })
			got <- lk
		}()
		waitQueued(t, rdb, k, int64(i+1))
	}
	return holders, got
}

// gotIn waits for a waiter of got to get in.
func gotIn(t *testing.T, got chan *dlock.Lock, what string) {
	t.Helper()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatalf("no waiter got in after %s", what)
	}
}

// An admin release (ReleaseToken, ForceRelease) does not know the limit its
// semaphore's callers pass: it never grants permits beyond it. Without a
// stored limit it grants nothing itself; the first queued waiter, woken,
// takes what its own limit lets in, at once.
func TestSemaphoreAdminReleaseKeepsLimit(t *testing.T) {
	t.Run("ReleaseToken", func(t *testing.T) {
		k := key(t)
		c, _ := newClient(t, dlock.Options{})
		holders, got := semFullAboveLimit(t, c, k)
		for i, want := range []int64{3, 2} { // no room for a waiter yet
			if err := adminOf(t, c).ReleaseToken(t.Context(), k, holders[i].Token()); err != nil {
				t.Fatal(err)
			}
			if n := inUse(t, c, k); n != want {
				t.Fatalf("after %d admin release(s): %d permits in use, want %d (limit 2)", i+1, n, want)
			}
		}
		if err := adminOf(t, c).ReleaseToken(t.Context(), k, holders[2].Token()); err != nil {
			t.Fatal(err)
		}
		gotIn(t, got, "the admin release that left 1 permit in use") // woken, not by its retry
		if n := inUse(t, c, k); n != 2 {
			t.Fatalf("%d permits in use, want 2", n)
		}
		if err := adminOf(t, c).ReleaseToken(t.Context(), k, holders[3].Token()); err != nil {
			t.Fatal(err)
		}
		gotIn(t, got, "the last holder's admin release")
	})
	t.Run("ForceRelease", func(t *testing.T) {
		k := key(t)
		rdb := srv.NewClient()
		inj := faultcmd.New()
		rdb.AddHook(inj)
		c, _ := newClientOn(t, rdb, dlock.Options{})
		_, got := semFullAboveLimit(t, c, k)
		// The third holder's release fails: two of the four are left.
		inj.Add(faultcmd.Rule{Name: "third release", Action: faultcmd.FailBefore, Nth: 3,
			Match: faultcmd.Match{Script: "semaphore_release", Key: k}})
		if _, err := adminOf(t, c).ForceRelease(t.Context(), k); !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("ForceRelease with its third release failing: %v", err)
		}
		if n := inUse(t, c, k); n != 2 {
			t.Fatalf("after 2 of 4 holders released: %d permits in use, want 2 (limit 2)", n)
		}
		if ok, err := adminOf(t, c).ForceRelease(t.Context(), k); !ok || err != nil {
			t.Fatalf("ForceRelease = %v, %v", ok, err)
		}
		gotIn(t, got, "ForceRelease")
		gotIn(t, got, "ForceRelease")
		if n := inUse(t, c, k); n != 2 {
			t.Fatalf("%d permits in use, want 2", n)
		}
	})
}

// semKeys returns every Redis key of the semaphore k but its stored limit
// and that limit's version (data, kept without a TTL), with its PTTL.
func semKeys(t *testing.T, rdb *redis.Client, k string) map[string]time.Duration {
	t.Helper()
	ctx := t.Context()
	out := map[string]time.Duration{}
	names := []string{k}
	iter := rdb.Scan(ctx, 0, "dlock:{"+k+"}:*", 100).Iterator()
	for iter.Next(ctx) {
		names = append(names, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if name == "dlock:{"+k+"}:limit" || name == "dlock:{"+k+"}:limitver" {
			continue
		}
		if d := rdb.PTTL(ctx, name).Val(); d != -2 { // -2: gone meanwhile
			out[name] = d
		}
	}
	return out
}

// allExpire fails if a key of the semaphore k has no TTL.
func allExpire(t *testing.T, rdb *redis.Client, k, after string) {
	t.Helper()
	for name, d := range semKeys(t, rdb, k) {
		if d < 0 {
			t.Errorf("after %s: %s has no TTL (%v)", after, name, d)
		}
	}
}

// Every key a semaphore's scripts write expires: after acquires granted,
// queued, refused and withdrawn, a newcomer refused while the queue is
// served to a waiter that died, admin releases, and a limit stored and
// removed, no key of the semaphore is left without a TTL.
func TestSemaphoreKeysAlwaysExpire(t *testing.T) {
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	tok := semTokens(k, 5)
	holder, dead, above, newcomer := tok[0], tok[1], tok[2], tok[3]
	const nobody = "dlock:client:nobody" // the dead waiter's channel
	attempt := func(token, mode string, n int, ttl time.Duration) bool {
		t.Helper()
		ok, err := dlock.SemaphoreAttempt(ctx, c, k, token, mode, nobody, 1, n, ttl, 30*time.Second, time.Second)
		if err != nil && !errors.Is(err, dlock.ErrInvalidPermits) {
			t.Fatalf("%s attempt: %v", mode, err)
		}
		return ok
	}
	if !attempt(holder, "try", 1, 300*time.Millisecond) {
		t.Fatal("the first acquire was not granted")
	}
	if attempt(dead, "q1", 1, time.Minute) {
		t.Fatal("a waiter got the permit that is held")
	}
	allExpire(t, rdb, k, "an acquire granted, one queued")
	if attempt(above, "q1", 2, time.Minute) {
		t.Fatal("2 permits of 1 granted")
	}
	allExpire(t, rdb, k, "an acquire above the limit")
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := c.Semaphore(k, 1).Acquire(short, 1)
	cancel()
	if !errors.Is(err, dlock.ErrContextDone) {
		t.Fatalf("Acquire behind the holder: %v", err)
	}
	allExpire(t, rdb, k, "a waiter that gave up")
	// The holder dies: its permit lapses with its lease (the semaphore's
	// keys expire with it). The dead waiter is still queued.
	for end := time.Now().Add(10 * time.Second); rdb.Exists(ctx, k).Val() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the holder's permit never lapsed")
		}
	}
	// A newcomer serves the queue (the dead waiter is handed the permit)
	// and is refused itself.
	if attempt(newcomer, "try", 1, time.Minute) {
		t.Fatal("the newcomer got in ahead of the queued waiter")
	}
	if info, err := adminOf(t, c).Inspect(ctx, k); err != nil || info.Holders != 1 {
		t.Fatalf("after the newcomer: %+v, %v; want the dead waiter handed the permit", info, err)
	}
	allExpire(t, rdb, k, "a newcomer refused after serving the queue")
	if err := c.Semaphore(k, 1).SetLimit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	allExpire(t, rdb, k, "SetLimit")
	if err := adminOf(t, c).ReleaseToken(ctx, k, dead); err != nil {
		t.Fatal(err)
	}
	allExpire(t, rdb, k, "ReleaseToken")
	if err := c.Semaphore(k, 1).SetLimit(ctx, 0); err != nil {
		t.Fatal(err)
	}
	lk, err := c.Semaphore(k, 1).TryAcquire(ctx, 1, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(ctx)
	if attempt(tok[4], "q1", 1, time.Minute) {
		t.Fatal("a waiter got the permit that is held")
	}
	if _, err := adminOf(t, c).ForceRelease(ctx, k); err != nil {
		t.Fatal(err)
	}
	allExpire(t, rdb, k, "ForceRelease")
	if len(semKeys(t, rdb, k)) == 0 {
		t.Fatal("no keys checked")
	}
}

// A waiter's first attempt (q1) run twice, as the Redis client re-sends it
// after a lost reply, may queue the waiter twice: the permits a release
// frees are still counted once, and go to the next waiter.
func TestSemaphoreJoinResentCountsOnce(t *testing.T) {
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	tok := semTokens(k, 2)
	lk, err := c.Semaphore(k, 2).TryAcquire(ctx, 2, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{tok[0], tok[0], tok[1]} {
		if ok, err := dlock.SemaphoreAttempt(ctx, c, k, w, "q1", "dlock:client:nobody", 2, 1, time.Minute, time.Minute, 30*time.Second); ok || err != nil {
			t.Fatalf("join behind a full semaphore: %v, %v", ok, err)
		}
	}
	if q := rdb.LRange(ctx, queueKey(k), 0, -1).Val(); len(q) != 3 {
		t.Fatalf("queue after the re-sent join: %q; want the waiter in it twice", q)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	holders := rdb.ZRange(ctx, k, 0, -1).Val()
	perHolder := rdb.HGetAll(ctx, permitsKey(k)).Val()
	var sum int64
	for _, h := range holders {
		var n int64
		fmt.Sscan(perHolder[h], &n)
		sum += n
	}
	if used := inUse(t, c, k); used != sum || len(holders) != 2 {
		t.Fatalf("after the release: holders %q, %d permits counted in use, %d held (%v)", holders, used, sum, perHolder)
	}
}
