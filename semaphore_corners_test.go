package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
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
	info, err := c.Inspect(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	return info.Permits
}

// semKeys returns every Redis key of the semaphore k but its stored limit
// (data, kept without a TTL), with its PTTL.
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
		if name == "dlock:{"+k+"}:limit" {
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
	if info, err := c.Inspect(ctx, k); err != nil || info.Holders != 1 {
		t.Fatalf("after the newcomer: %+v, %v; want the dead waiter handed the permit", info, err)
	}
	allExpire(t, rdb, k, "a newcomer refused after serving the queue")
	if err := c.Semaphore(k, 1).SetLimit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	allExpire(t, rdb, k, "SetLimit")
	if err := c.ReleaseToken(ctx, k, dead); err != nil {
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
	if _, err := c.ForceRelease(ctx, k); err != nil {
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
