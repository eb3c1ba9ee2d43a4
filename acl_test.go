package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/legacy"
	"github.com/redis/go-redis/v9"
)

// ACL rules of the tests' Redis users (Redis 7: a user gets no channel
// unless its rules grant one; resetchannels says so explicitly).
const (
	aclFull       = "~* &* +@all"
	aclNoChannels = "~* resetchannels +@all"
	aclKeyPattern = "~app:* &* +@all"
	aclNoScripts  = "~* &* +@all -@scripting"
)

// aclClient makes a Redis user on srv with rules, and returns a dlock
// Client logged in as it; both go at the end of the test.
func aclClient(t *testing.T, rules string, opts dlock.Options) *dlock.Client {
	t.Helper()
	c, _ := aclUserClient(t, rules, opts)
	return c
}

// aclUserClient is aclClient that also returns the user's name.
func aclUserClient(t *testing.T, rules string, opts dlock.Options) (*dlock.Client, string) {
	t.Helper()
	ctx := context.Background()
	admin := srv.NewClient()
	defer admin.Close()
	user := fmt.Sprintf("acl-%d", keySeq.Add(1))
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw"}
	for _, r := range strings.Fields(rules) {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s %s: %v", user, rules, err)
	}
	t.Cleanup(func() {
		a := srv.NewClient()
		defer a.Close()
		_ = a.Do(context.Background(), "ACL", "DELUSER", user).Err()
	})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: "pw"})
	c, _ := newClientOn(t, rdb, opts)
	return c, user
}

// unlockedCleanly checks that Unlock reported a release and that the lock
// ended as released on the Client.
func unlockedCleanly(t *testing.T, lk *dlock.Lock, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("Unlock: %v, want nil (the release script ran: a refused publish must not fail it)", err)
	}
	select {
	case <-lk.Done():
	default:
		t.Fatal("Done still open after Unlock returned")
	}
	if !errors.Is(lk.Err(), dlock.ErrReleased) {
		t.Fatalf("Err() = %v after Unlock, want ErrReleased", lk.Err())
	}
}

// A Redis user without channel rights: every release publishes a wake-up
// that Redis refuses. The release must still report success, end the lock
// on the Client, and have freed (or handed on) the key in Redis.
func TestACLNoChannelRightsRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := aclClient(t, aclNoChannels, dlock.Options{})
	admin := srv.NewClient()
	defer admin.Close()
	gone := func(t *testing.T, k string) {
		t.Helper()
		if n, err := admin.Exists(ctx, k).Result(); err != nil || n != 0 {
			t.Fatalf("key %q still exists after Unlock (n=%d, err=%v)", k, n, err)
		}
	}

	t.Run("lock", func(t *testing.T) {
		k := key(t)
		lk, err := c.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		unlockedCleanly(t, lk, lk.Unlock(ctx))
		gone(t, k)
	})
	t.Run("hand-off", func(t *testing.T) {
		k := key(t)
		lk, err := c.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		// A waiter of a Client with full rights queues behind it. The
		// hand-off's message is refused, so it finds the lock on a retry.
		w, _ := newClient(t, dlock.Options{WaiterLease: 300 * time.Millisecond, RetryInterval: 100 * time.Millisecond})
		got := make(chan error, 1)
		go func() {
			wl, err := w.Lock(ctx, k)
			if err == nil {
				err = wl.Unlock(ctx)
			}
			got <- err
		}()
		waitQueued(t, admin, k, 1)
		unlockedCleanly(t, lk, lk.Unlock(ctx))
		if err := <-got; err != nil {
			t.Fatalf("the waiter: %v", err)
		}
	})
	t.Run("semaphore", func(t *testing.T) {
		k := key(t)
		lk, err := c.Semaphore(k, 2).Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		unlockedCleanly(t, lk, lk.Unlock(ctx))
		gone(t, k)
	})
	t.Run("legacy", func(t *testing.T) {
		k := key(t)
		lk, err := c.Lock(ctx, k, dlock.WithProtocol(legacy.New(legacy.Options{Unit: legacy.Milliseconds})))
		if err != nil {
			t.Fatal(err)
		}
		unlockedCleanly(t, lk, lk.Unlock(ctx))
		gone(t, k)
	})
	t.Run("election", func(t *testing.T) {
		e := c.Election(key(t), dlock.ElectionOptions{})
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		l, err := e.Campaign(cctx, "me")
		if err != nil {
			t.Fatalf("Campaign: %v (publishing the leader's record must not fail on a refused PUBLISH)", err)
		}
		if err := l.Resign(ctx); err != nil {
			t.Fatalf("Resign: %v", err)
		}
		if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
			t.Fatalf("Leader after Resign: %v, want ErrNoLeader", err)
		}
	})
}

// A Client whose user has no channel rights cannot be woken: a call that
// has to wait ends with ErrNoPermission, at once rather than at its
// context's end, and leaves nothing queued.
func TestACLNoChannelRightsWait(t *testing.T) {
	for _, barging := range []bool{false, true} {
		t.Run(fmt.Sprintf("barging=%v", barging), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c := aclClient(t, aclNoChannels, dlock.Options{Barging: barging})
			h, admin := newClient(t, dlock.Options{})
			k := key(t)
			held, err := h.Lock(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Unlock(ctx)
			start := time.Now()
			lk, err := c.Lock(ctx, k)
			if err == nil {
				_ = lk.Unlock(ctx)
				t.Fatal("Lock of a held key acquired")
			}
			if !errors.Is(err, dlock.ErrNoPermission) || errors.Is(err, dlock.ErrUnavailable) {
				t.Fatalf("Lock: %v after %v, want ErrNoPermission (not ErrUnavailable)", err, time.Since(start))
			}
			var pe *dlock.PermissionError
			if !errors.As(err, &pe) || pe.What != "channel" {
				t.Fatalf("Lock: %v, want a *PermissionError naming a channel", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line message: %q", err)
			}
			if n, _ := admin.LLen(ctx, queueKey(k)).Result(); n != 0 {
				t.Fatalf("%d entries left in the wait queue", n)
			}
			// TryLock needs no channel.
			if _, err := c.TryLock(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryLock: %v, want ErrNotAcquired", err)
			}
		})
	}
}

// Refusals of keys and commands are ErrNoPermission, not ErrUnavailable
// (which callers retry), and name what was refused.
func TestACLRefusedKeysAndCommands(t *testing.T) {
	for _, tc := range []struct{ name, rules, what string }{
		{"key pattern", aclKeyPattern, "key"},
		{"no scripting", aclNoScripts, "command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c := aclClient(t, tc.rules, dlock.Options{})
			k := key(t)
			for _, call := range []struct {
				name string
				run  func() error
			}{
				{"TryLock", func() error { _, err := c.TryLock(ctx, k); return err }},
				{"Lock", func() error { _, err := c.Lock(ctx, k); return err }},
				{"Semaphore", func() error { _, err := c.Semaphore(k, 2).Acquire(ctx, 1); return err }},
			} {
				err := call.run()
				if !errors.Is(err, dlock.ErrNoPermission) || errors.Is(err, dlock.ErrUnavailable) {
					t.Fatalf("%s: %v, want ErrNoPermission (not ErrUnavailable)", call.name, err)
				}
				var pe *dlock.PermissionError
				if !errors.As(err, &pe) || pe.What != tc.what {
					t.Fatalf("%s: %v, want a *PermissionError naming a %s", call.name, err, tc.what)
				}
				var re redis.Error
				if !errors.As(err, &re) || !strings.HasPrefix(re.Error(), "NOPERM") {
					t.Fatalf("%s: %v does not wrap Redis's NOPERM reply", call.name, err)
				}
			}
		})
	}
}

// Users with the rights dlock needs (docs/guarantees.md): waiting,
// hand-off, release, semaphores and elections work, and the waiter is woken
// by the hand-off, not its retry timer.
func TestACLFullRights(t *testing.T) {
	for _, rules := range []string{
		aclFull,
		// The narrowest rules documented: the caller's keys, and dlock's
		// keys and channels under its prefix.
		"~TestACLFullRights* ~dlock:* &dlock:* +@all -@dangerous",
	} {
		t.Run(rules, func(t *testing.T) { fullRights(t, rules) })
	}
}

func fullRights(t *testing.T, rules string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := aclClient(t, rules, dlock.Options{})
	b := aclClient(t, rules, dlock.Options{RetryInterval: time.Minute, WaiterLease: time.Minute})
	admin := srv.NewClient()
	defer admin.Close()
	k := key(t)
	lk, err := a.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		wl, err := b.Lock(ctx, k)
		if err == nil {
			err = wl.Unlock(ctx)
		}
		got <- err
	}()
	waitQueued(t, admin, k, 1)
	unlockedCleanly(t, lk, lk.Unlock(ctx))
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v (with a one-minute retry, only the hand-off's message could wake it in time)", err)
	}
	sl, err := a.Semaphore(key(t), 2).Acquire(ctx, 2)
	if err != nil {
		t.Fatalf("Semaphore: %v", err)
	}
	unlockedCleanly(t, sl, sl.Unlock(ctx))
	e := a.Election(key(t), dlock.ElectionOptions{})
	l, err := e.Campaign(ctx, "me")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
}

// Options.NoPubSub: a Client whose user has no channel rights waits on its
// retry timer alone, and gets the lock after its release.
func TestACLNoPubSub(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := aclClient(t, aclNoChannels, dlock.Options{NoPubSub: true, RetryInterval: 50 * time.Millisecond})
	if !c.Options().Barging {
		t.Fatal("NoPubSub without Barging: a queued waiter would not hear its hand-off")
	}
	h, _ := newClient(t, dlock.Options{})
	k := key(t)
	held, err := h.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lk, err := c.Lock(ctx, k)
		if err == nil {
			err = lk.Unlock(ctx)
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Lock returned while the key was held: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Lock after the release: %v", err)
	}
}

// A command the ACL refuses inside a script (here DEL, after the script
// may have written): ErrNoPermission naming a command, not ErrUnavailable;
// once the ACL grants it, the retried Unlock releases the lock.
func TestACLRefusedInsideScript(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, user := aclUserClient(t, aclFull+" -del", dlock.Options{})
	admin := srv.NewClient()
	defer admin.Close()
	k := key(t)
	lk, err := c.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	err = lk.Unlock(ctx)
	var pe *dlock.PermissionError
	if !errors.As(err, &pe) || pe.What != "command" || errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Unlock: %v, want a *PermissionError naming a command (not ErrUnavailable)", err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "+del").Err(); err != nil {
		t.Fatal(err)
	}
	unlockedCleanly(t, lk, lk.Unlock(ctx))
	if n, err := admin.Exists(ctx, k).Result(); err != nil || n != 0 {
		t.Fatalf("key still exists after Unlock (n=%d, err=%v)", n, err)
	}
}
