package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/redis/go-redis/v9"
)

// A renewal for a short TTL that lands late, after a later and longer
// renewal of the same lock confirmed a later Deadline, must not cut the
// lock short: on the server every key of the lock outlives the Deadline,
// and no other Client takes the lock before it. One case per renewal
// script (extend.lua for one key and for a multi-key lock, holds_extend.lua
// for reentrant and read holds, semaphore_extend.lua).
func TestLateShortRenewalKeepsLease(t *testing.T) {
	kinds := []struct {
		name   string
		kind   primitive
		other  primitive // what another caller then tries
		script string    // the renewal's script
	}{
		{"exclusive", nil, nil, "extend"},
		{"multi", multiKeys(), multiKeys(), "extend"},
		{"reentrant", reentrant("job-a"), reentrant("job-b"), "holds_extend"},
		{"shared", readers(), writer(), "holds_extend"},
		{"semaphore", permits(1, 1), permits(1, 1), "semaphore_extend"},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := t.Context()
			a, inj := faultyClient(t, dlock.Options{})
			b, _ := newClient(t, dlock.Options{})
			k := key(t)
			lk, err := kind.kind.TryLock(ctx, a, k, dlock.WithTTL(10*time.Second), dlock.WithoutRenewal())
			if err != nil {
				t.Fatal(err)
			}
			defer lk.Unlock(context.Background())
			// Load the script: the late EVALSHA must find it.
			if err := lk.Extend(ctx, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			first := lk.Keys()[0]
			inj.Add(faultcmd.Rule{Name: "1s renewal lands after the 30s one", Action: faultcmd.Late,
				Match: faultcmd.Match{Script: kind.script, Key: first, Arg: "1000"},
				Until: faultcmd.Match{Script: kind.script, Key: first, Arg: "30000"}})
			if err := lk.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrUnavailable) {
				t.Fatalf("Extend(1s) = %v, want ErrUnavailable (its reply lost)", err)
			}
			if err := lk.Extend(ctx, 30*time.Second); err != nil {
				t.Fatalf("Extend(30s) = %v", err)
			}
			lateLanded(t, inj)
			keepsLease(t, lk, 1500*time.Millisecond, func() error {
				o, err := kind.other.TryLock(ctx, b, k)
				if err == nil {
					_ = o.Unlock(ctx)
				}
				return err
			})
		})
	}
}

// The watchdog's bulk renewal (extend_many.lua) confirms a later Deadline
// than an Extend to a short TTL whose command is delayed and lands after
// it: the lock must keep the watchdog's expiry.
func TestLateShortExtendAfterWatchdogRenewal(t *testing.T) {
	ctx := t.Context()
	a, inj := faultyClient(t, dlock.Options{})
	b, _ := newClient(t, dlock.Options{})
	k := key(t)
	lk, err := a.TryLock(ctx, k, dlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(context.Background())
	if err := lk.Extend(ctx, 3*time.Second); err != nil { // loads extend.lua
		t.Fatal(err)
	}
	// A watchdog renewal loads extend_many.lua (a NOSCRIPT reply would
	// complete the Until below before the renewal ran).
	for n := a.Stats().Renewals; a.Stats().Renewals == n; time.Sleep(10 * time.Millisecond) {
		if err := lk.Err(); err != nil {
			t.Fatal(err)
		}
	}
	inj.Add(faultcmd.Rule{Name: "300ms Extend lands after a watchdog renewal", Action: faultcmd.Late,
		Match: faultcmd.Match{Script: "extend", Key: k, Arg: "300"},
		Until: faultcmd.Match{Script: "extend_many", Key: k}})
	if err := lk.Extend(ctx, 300*time.Millisecond); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Extend(300ms) = %v, want ErrUnavailable (its reply lost)", err)
	}
	lateLanded(t, inj)
	keepsLease(t, lk, time.Second, func() error {
		o, err := b.TryLock(ctx, k)
		if err == nil {
			_ = o.Unlock(ctx)
		}
		return err
	})
}

// writer is the write lock of an RWLock.
func writer() primitive {
	return func(ctx context.Context, c *dlock.Client, key string, try bool, opts ...dlock.LockOption) (*dlock.Lock, error) {
		if try {
			return c.RWLock(key).TryLock(ctx, opts...)
		}
		return c.RWLock(key).Lock(ctx, opts...)
	}
}

// multiKeys is a multi-key lock over two keys derived from key, in one
// Cluster slot (one renewal call).
func multiKeys() primitive {
	return func(ctx context.Context, c *dlock.Client, key string, try bool, opts ...dlock.LockOption) (*dlock.Lock, error) {
		keys := []string{"{" + key + "}:a", "{" + key + "}:b"}
		if try {
			return c.TryLockMulti(ctx, keys, opts...)
		}
		return c.LockMulti(ctx, keys, opts...)
	}
}

// lateLanded waits until a Late command of inj has been sent.
func lateLanded(t *testing.T, inj *faultcmd.Injector) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		for _, e := range inj.Log() {
			if e.Action != faultcmd.Late || !strings.HasPrefix(e.Outcome, "sent") {
				continue
			}
			if strings.Contains(e.Outcome, "NOSCRIPT") || strings.Contains(e.Outcome, "ERR") {
				t.Fatalf("the late command failed: %s", e.Outcome)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the late command never landed")
		}
	}
}

// keepsLease checks, for at least d, that lk is held, that each of its
// keys expires no sooner on the server than lk's Deadline, and that
// take (another caller's attempt) fails with ErrNotAcquired.
func keepsLease(t *testing.T, lk *dlock.Lock, d time.Duration, take func() error) {
	t.Helper()
	rdb := srv.NewClient()
	defer rdb.Close()
	for end := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		for _, k := range lk.Keys() {
			expiresAfter(t, rdb, k, lk)
		}
		if err := take(); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("another caller's attempt = %v while the lock is held until %v: two holders",
				err, time.Until(lk.Deadline()).Round(time.Millisecond))
		}
		if time.Now().After(end) {
			return
		}
	}
}

// expiresAfter fails t unless key k, on the server, expires no sooner
// than lk's Deadline. The Deadline is read first: a renewal confirmed
// after the TTL was read may have moved it later.
func expiresAfter(t *testing.T, rdb *redis.Client, k string, lk *dlock.Lock) {
	t.Helper()
	if err := lk.Err(); err != nil {
		t.Fatalf("the lock ended: %v", err)
	}
	dl := lk.Deadline()
	pttl, err := rdb.PTTL(t.Context(), k).Result()
	if err != nil {
		t.Fatal(err)
	}
	read := time.Now() // the server read the TTL before this
	if read.Add(pttl + time.Millisecond).Before(dl) {
		t.Fatalf("key %s expires in %v on the server; the holder counts on %v",
			k, pttl, dl.Sub(read).Round(time.Millisecond))
	}
}
