package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// An owner id, SharedValue or any other stored value is never a release
// credential: only a handle's own token releases it, for every kind.
func TestReleaseTokenEveryKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := newClient(t, dlock.Options{})
	ttl := dlock.WithTTL(30 * time.Second)

	type kind struct {
		name  string
		take  primitive
		bogus []string // values that must not release it
	}
	for _, k := range []kind{
		{"reentrant", reentrant("job-42"), []string{"job-42", dlock.ReentrantPrefix + "job-42"}},
		{"shared", readers(), []string{dlock.SharedValue}},
		{"semaphore", permits(3, 1), []string{"job-42"}},
		{"plain", nil, []string{"job-42"}},
	} {
		t.Run(k.name, func(t *testing.T) {
			key := key(t)
			a, err := k.take.TryLock(ctx, c, key, ttl)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Unlock(ctx)
			var b *dlock.Lock
			if k.name != "plain" {
				if b, err = k.take.TryLock(ctx, c, key, ttl); err != nil {
					t.Fatal(err)
				}
				defer b.Unlock(ctx)
			}
			for _, v := range k.bogus {
				err := c.ReleaseToken(ctx, key, v)
				if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrTaken) {
					t.Errorf("ReleaseToken(%q) = %v; want ErrNotHeld and ErrTaken", v, err)
				}
			}
			if info, err := c.Inspect(ctx, key); err != nil || !info.Held {
				t.Fatalf("after ReleaseToken of a non-token: %+v, %v; want still held", info, err)
			}
			if err := a.Extend(ctx, 30*time.Second); err != nil {
				t.Fatalf("handle a after bogus releases: %v", err)
			}
			// The handle's own token releases that handle (only).
			if err := c.ReleaseToken(ctx, key, a.Token()); err != nil {
				t.Fatalf("ReleaseToken(a.Token()) = %v", err)
			}
			if err := a.Extend(ctx, 30*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("a.Extend after its release: %v; want ErrNotHeld", err)
			}
			if b != nil {
				if err := b.Extend(ctx, 30*time.Second); err != nil {
					t.Errorf("the other handle b after a's release: %v", err)
				}
				if err := c.ReleaseToken(ctx, key, b.Token()); err != nil {
					t.Fatalf("ReleaseToken(b.Token()) = %v", err)
				}
			}
			if info, err := c.Inspect(ctx, key); err != nil || info.Held {
				t.Errorf("after releasing every handle: %+v, %v; want free", info, err)
			}
			if err := c.ReleaseToken(ctx, key, a.Token()); !errors.Is(err, dlock.ErrExpired) {
				t.Errorf("ReleaseToken of a free key = %v; want ErrExpired", err)
			}
		})
	}
}

// ForceRelease steals every kind of lock, and its holders find out.
func TestForceReleaseEveryKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := newClient(t, dlock.Options{})
	for _, take := range []primitive{reentrant("job-7"), readers(), permits(2, 1), nil} {
		key := key(t)
		a, err := take.TryLock(ctx, c, key, dlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ok, err := c.ForceRelease(ctx, key)
		if !ok || err != nil {
			t.Fatalf("ForceRelease(%s) = %v, %v", key, ok, err)
		}
		if info, err := c.Inspect(ctx, key); err != nil || info.Held {
			t.Errorf("after ForceRelease: %+v, %v; want free", info, err)
		}
		if err := a.Extend(ctx, 30*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("holder's Extend after ForceRelease: %v; want ErrNotHeld", err)
		}
		_ = a.Unlock(ctx)
	}
}

// Admin knows dlock's own auxiliary keys: List shows them under their lock,
// never as locks, and ForceRelease refuses them.
func TestAdminAuxKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb := newClient(t, dlock.Options{})
	sem := key(t)
	if err := c.Semaphore(sem, 1).SetLimit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	lk, err := c.Semaphore(sem, 5).TryAcquire(ctx, 1, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(ctx)
	cnt := c.Counter(key(t), 2)
	if err := cnt.Set(ctx, 10); err != nil {
		t.Fatal(err)
	}
	ks := c.KeysFor(sem)
	limitKey := strings.TrimSuffix(ks.Fence, ":fence") + ":limit"
	if n, _ := rdb.Exists(ctx, limitKey).Result(); n != 1 {
		t.Fatalf("no limit key %s", limitKey)
	}
	var countKey string
	keys, _ := rdb.Keys(ctx, "dlock:*:count").Result()
	for _, k := range keys {
		if strings.Contains(k, t.Name()) {
			countKey = k
		}
	}
	if countKey == "" {
		t.Fatalf("no Counter key among %v", keys)
	}

	found := map[string]dlock.Info{}
	if err := c.List(ctx, "*"+t.Name()+"*", func(i dlock.Info) bool { found[i.Key] = i; return true }); err != nil {
		t.Fatal(err)
	}
	for k, i := range found {
		if strings.HasPrefix(k, "dlock:") || i.Kind == dlock.KindForeign {
			t.Errorf("List shows %q as a lock: %+v", k, i)
		}
	}
	if i, ok := found[sem]; !ok || i.Kind != dlock.KindSemaphore || !contains(i.Aux, limitKey) {
		t.Errorf("List: semaphore %q: %+v (found %v); want it, with %s among its Aux", sem, i, ok, limitKey)
	}

	for _, aux := range []string{limitKey, countKey, ks.Fence, ks.Queue} {
		ok, err := c.ForceRelease(ctx, aux)
		if ok || !errors.Is(err, dlock.ErrReservedKey) {
			t.Errorf("ForceRelease(%s) = %v, %v; want ErrReservedKey", aux, ok, err)
		}
		if err := c.ReleaseToken(ctx, aux, "2"); !errors.Is(err, dlock.ErrReservedKey) {
			t.Errorf("ReleaseToken(%s) = %v; want ErrReservedKey", aux, err)
		}
	}
	if v, _ := rdb.Get(ctx, limitKey).Result(); v != "2" {
		t.Errorf("limit key after ForceRelease: %q; want 2", v)
	}
	if n, _ := rdb.Exists(ctx, countKey).Result(); n != 1 {
		t.Errorf("Counter key deleted by ForceRelease")
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Library errors say what was wrong and with which value, on one line, and
// stay errors.Is-able.
func TestErrorMessagesNameTheValue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := dlock.New(srv.NewClient(), dlock.Options{Prefix: "a{b"})
	if !errors.Is(err, dlock.ErrInvalidOpts) || !strings.Contains(err.Error(), `"a{b"`) {
		t.Errorf("Prefix a{b: %v; want ErrInvalidOpts naming the prefix", err)
	}
	_, err = dlock.New(srv.NewClient(), dlock.Options{TTL: 2 * dlock.MaxTTL})
	if !errors.Is(err, dlock.ErrInvalidTTL) || !strings.Contains(err.Error(), (2*dlock.MaxTTL).String()) {
		t.Errorf("TTL 2*MaxTTL: %v; want ErrInvalidTTL naming the value", err)
	}
	c, _ := newClient(t, dlock.Options{})
	_, err = c.TryLock(ctx, key(t), dlock.WithTTL(time.Millisecond))
	if !errors.Is(err, dlock.ErrInvalidTTL) || !errors.Is(err, dlock.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "1ms is outside 3.0") {
		t.Errorf("WithTTL(1ms): %v; want ErrInvalidTTL naming 1ms and the shortest TTL that works", err)
	}
	_, err = c.TryLock(ctx, strings.Repeat("k", 70_000))
	if !errors.Is(err, dlock.ErrKeyTooLong) || !strings.Contains(err.Error(), "70000 bytes") {
		t.Errorf("70,000-byte key: %v; want ErrKeyTooLong naming the length", err)
	}
	_, err = c.Semaphore(key(t), 0).TryAcquire(ctx, 1)
	if !errors.Is(err, dlock.ErrInvalidLimit) || !strings.Contains(err.Error(), "limit 0") {
		t.Errorf("Semaphore limit 0: %v; want ErrInvalidLimit naming the limit", err)
	}
	// A deleted key is reported as such, not as "expired".
	lk, err := c.TryLock(ctx, key(t))
	if err != nil {
		t.Fatal(err)
	}
	srv.Client(t).Del(ctx, lk.Key())
	err = lk.Unlock(ctx)
	if !errors.Is(err, dlock.ErrExpired) || !strings.Contains(err.Error(), "deleted, or its TTL ran out") {
		t.Errorf("Unlock of a deleted key: %v", err)
	}
	for _, e := range []error{err, dlock.ErrInvalidTTL} {
		if strings.Contains(e.Error(), "\n") {
			t.Errorf("error on several lines: %q", e)
		}
	}
}
