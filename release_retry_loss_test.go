package dlock_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
)

// A retried Unlock of a semaphore after a lost release reply answers what
// the release found. If an operator's ForceRelease took the permits first
// (it leaves no tombstone), the first release ran and found them gone: the
// retry finds them gone too, and reports the loss. If the first release
// gave them back, its tombstone makes the retry answer released.
func TestRetriedSemaphoreUnlockAfterLostReply(t *testing.T) {
	for _, forced := range []bool{true, false} {
		name := "released"
		if forced {
			name = "force-released first"
		}
		t.Run(name, func(t *testing.T) {
			var lost atomic.Int32
			a, inj := faultyClient(t, dlock.Options{ReleaseTimeout: oneSend, Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) { lost.Add(1) }}})
			admin, _ := newClient(t, dlock.Options{})
			k := key(t)
			lk, err := a.Semaphore(k, 2).Acquire(t.Context(), 1, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if forced {
				if ok, err := adminOf(t, admin).ForceRelease(t.Context(), k); !ok || err != nil {
					t.Fatalf("ForceRelease = %v, %v", ok, err)
				}
			}
			inj.Add(faultcmd.Rule{Name: "lost release reply", Action: faultcmd.DropReply,
				Match: faultcmd.Match{Script: "semaphore_release", Key: k}})
			if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrUnavailable) {
				t.Fatalf("first Unlock = %v, want ErrUnavailable", err)
			}
			err = lk.Unlock(t.Context())
			if forced {
				if !errors.Is(err, dlock.ErrLost) || lost.Load() != 1 {
					t.Fatalf("retried Unlock = %v, Lost hook calls %d: want the loss (ForceRelease took the permits before the release ran)", err, lost.Load())
				}
				return
			}
			if err != nil || !errors.Is(lk.Err(), dlock.ErrReleased) || lost.Load() != 0 {
				t.Fatalf("retried Unlock = %v, Err = %v, Lost hook calls %d: want nil, ErrReleased and none", err, lk.Err(), lost.Load())
			}
		})
	}
}

// The same for the exclusive, read and reentrant locks: a retried
// Unlock after a lost release reply reports the loss when an operator's
// ForceRelease took the hold before any release ran (and another owner
// took the key since), and answers released when the first release ran.
func TestRetriedUnlockAfterLostReplyTells(t *testing.T) {
	kinds := []struct {
		name   string
		script string
		lock   func(c *dlock.Client, k string) (*dlock.Lock, error)
	}{
		{"lock", "release", func(c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.TryLock(t.Context(), k, dlock.WithTTL(time.Minute))
		}},
		{"read lock", "holds_release", func(c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.RWLock(k).TryRLock(t.Context(), dlock.WithTTL(time.Minute))
		}},
		{"reentrant", "holds_release", func(c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.Reentrant(k).Lock(t.Context(), "owner", dlock.WithTTL(time.Minute))
		}},
	}
	for _, kind := range kinds {
		for _, forced := range []bool{true, false} {
			name := kind.name + "/released"
			if forced {
				name = kind.name + "/force-released first"
			}
			t.Run(name, func(t *testing.T) {
				var lost atomic.Int32
				a, inj := faultyClient(t, dlock.Options{ReleaseTimeout: oneSend, Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) { lost.Add(1) }}})
				admin, _ := newClient(t, dlock.Options{})
				k := key(t)
				lk, err := kind.lock(a, k)
				if err != nil {
					t.Fatal(err)
				}
				if forced {
					if ok, err := adminOf(t, admin).ForceRelease(t.Context(), k); !ok || err != nil {
						t.Fatalf("ForceRelease = %v, %v", ok, err)
					}
					if _, err := admin.TryLock(t.Context(), k); err != nil {
						t.Fatalf("another owner's TryLock after ForceRelease: %v", err)
					}
				}
				inj.Add(faultcmd.Rule{Name: "lost release reply", Action: faultcmd.DropReply,
					Match: faultcmd.Match{Script: kind.script}})
				if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrUnavailable) {
					t.Fatalf("first Unlock = %v, want ErrUnavailable", err)
				}
				err = lk.Unlock(t.Context())
				if forced {
					if !errors.Is(err, dlock.ErrLost) || lost.Load() != 1 {
						t.Fatalf("retried Unlock = %v, Lost hook calls %d: want the loss (ForceRelease took the hold before the release ran)", err, lost.Load())
					}
					return
				}
				if err != nil || !errors.Is(lk.Err(), dlock.ErrReleased) || lost.Load() != 0 {
					t.Fatalf("retried Unlock = %v, Err = %v, Lost hook calls %d: want nil, ErrReleased and none", err, lk.Err(), lost.Load())
				}
			})
		}
	}
}

// Unlock sends a release whose reply was lost again by itself, within
// ReleaseTimeout, and answers what that second send finds: released when
// the first send ran, the loss when an operator's ForceRelease took the
// key (and another owner took it) before any release ran.
func TestUnlockResendsReleaseAfterLostReply(t *testing.T) {
	for _, forced := range []bool{true, false} {
		name := "released"
		if forced {
			name = "force-released first"
		}
		t.Run(name, func(t *testing.T) {
			var lost atomic.Int32
			a, inj := faultyClient(t, dlock.Options{Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) { lost.Add(1) }}})
			admin, rdb := newClient(t, dlock.Options{})
			k := key(t)
			lk, err := a.TryLock(t.Context(), k, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if forced {
				if ok, err := adminOf(t, admin).ForceRelease(t.Context(), k); !ok || err != nil {
					t.Fatalf("ForceRelease = %v, %v", ok, err)
				}
				if _, err := admin.TryLock(t.Context(), k); err != nil {
					t.Fatalf("another owner's TryLock after ForceRelease: %v", err)
				}
			}
			inj.Add(faultcmd.Rule{Name: "lost release reply", Action: faultcmd.DropReply,
				Match: faultcmd.Match{Script: "release", Key: k}})
			err = lk.Unlock(t.Context())
			if forced {
				if !errors.Is(err, dlock.ErrLost) || lost.Load() != 1 {
					t.Fatalf("Unlock = %v, Lost hook calls %d: want the loss (ForceRelease took the key before the release ran)", err, lost.Load())
				}
				return
			}
			if err != nil || !errors.Is(lk.Err(), dlock.ErrReleased) || lost.Load() != 0 {
				t.Fatalf("Unlock = %v, Err = %v, Lost hook calls %d: want nil, ErrReleased and none", err, lk.Err(), lost.Load())
			}
			if n, err := rdb.Exists(t.Context(), k).Result(); err != nil || n != 0 {
				t.Fatalf("key still there after Unlock: %d, %v", n, err)
			}
		})
	}
}

// An Unlock of a lock an operator's ForceRelease stole (a token lock's
// key, a semaphore holder's permits, a reentrant or read handle's hold, one
// key of a multi-key lock) reports the loss also when the release's reply
// comes after the lock's deadline (the deadline timer runs while the
// release is in flight): the release finds the mark the steal left, so the
// loss is not taken for the key's expiry after the caller let go.
// Meanwhile the key was another holder's.
func TestForceReleasedUnlockPastDeadlineReportsLoss(t *testing.T) {
	ttl, norenew := dlock.WithTTL(300*time.Millisecond), dlock.WithoutRenewal()
	type kind struct {
		take   func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error)
		stolen func(k string) string // the key ForceRelease steals
		other  func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error)
		script string // the release script delayed
	}
	same := func(k string) string { return k }
	tryLock := func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error) { return c.TryLock(t.Context(), k) }
	multiKeys := func(k string) []string { return []string{"{" + k + "}a", "{" + k + "}b"} }
	for name, kd := range map[string]kind{
		"token lock": {func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.TryLock(t.Context(), k, ttl, norenew)
		}, same, tryLock, "release"},
		"semaphore": {func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.Semaphore(k, 1).Acquire(t.Context(), 1, ttl, norenew)
		}, same, func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.Semaphore(k, 1).TryAcquire(t.Context(), 1)
		}, "semaphore_release"},
		"reentrant": {func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.Reentrant(k).TryLock(t.Context(), "o", ttl, norenew)
		}, same, tryLock, "holds_release"},
		"read": {func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.RWLock(k).TryRLock(t.Context(), ttl, norenew)
		}, same, tryLock, "holds_release"},
		"multi-key": {func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.TryLockMulti(t.Context(), multiKeys(k), ttl, norenew)
		}, func(k string) string { return multiKeys(k)[1] }, tryLock, "multi_release"},
	} {
		t.Run(name, func(t *testing.T) {
			var lost atomic.Int32
			a, inj := faultyClient(t, dlock.Options{Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) { lost.Add(1) }}})
			b, _ := newClient(t, dlock.Options{})
			k := key(t)
			lk, err := kd.take(t, a, k)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := adminOf(t, b).ForceRelease(t.Context(), kd.stolen(k)); !ok || err != nil {
				t.Fatalf("ForceRelease = %v, %v", ok, err)
			}
			other, err := kd.other(t, b, kd.stolen(k))
			if err != nil {
				t.Fatalf("the freed key: %v", err)
			}
			defer func() { _ = other.Unlock(context.Background()) }()
			late := time.Until(lk.Deadline()) + 60*time.Millisecond
			inj.Add(faultcmd.Rule{Name: "release past the deadline", Action: faultcmd.Delay, Delay: late,
				Match: faultcmd.Match{Script: kd.script}})
			err = lk.Unlock(t.Context())
			if !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrTaken) {
				t.Fatalf("Unlock = %v, want the loss (ErrLost, ErrTaken): ForceRelease took it before the release ran", err)
			}
			if !errors.Is(lk.Err(), dlock.ErrTaken) || lost.Load() != 1 {
				t.Fatalf("Err = %v, Lost hook calls %d: want ErrTaken and 1", lk.Err(), lost.Load())
			}
			if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrLost) {
				t.Fatalf("Unlock again = %v, want the loss again", err)
			}
		})
	}
}

// A retried Unlock whose first send failed without an answer reports the
// loss when an operator's ForceRelease took the lock since, for every kind
// and however long after the first send the retry comes: the release finds
// the mark the steal left, not a trace of the first send (which never
// ran). The retry here comes past the life of a release's tombstone.
func TestRetriedUnlockLongAfterFirstSendOfStolenLockReportsLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a release's tombstone (9 s)")
	}
	ttl := dlock.WithTTL(time.Minute)
	multiKeys := func(k string) []string { return []string{"{" + k + "}a", "{" + k + "}b"} }
	type kind struct {
		name   string
		take   func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error)
		stolen func(k string) string // the key ForceRelease steals
		script string                // the release script failed
	}
	same := func(k string) string { return k }
	kinds := []kind{
		{"token lock", func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.TryLock(t.Context(), k, ttl)
		}, same, "release"},
		{"semaphore", func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.Semaphore(k, 2).Acquire(t.Context(), 1, ttl)
		}, same, "semaphore_release"},
		{"reentrant", func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.Reentrant(k).TryLock(t.Context(), "o", ttl)
		}, same, "holds_release"},
		{"read", func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.RWLock(k).TryRLock(t.Context(), ttl)
		}, same, "holds_release"},
		{"multi-key", func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.TryLockMulti(t.Context(), multiKeys(k), ttl)
		}, func(k string) string { return multiKeys(k)[1] }, "multi_release"},
	}
	// Every kind's first Unlock fails first, then one wait past a
	// tombstone's life for all of them, then each steal and retry.
	type held struct {
		kind
		k    string
		lk   *dlock.Lock
		lost *atomic.Int32
	}
	b, _ := newClient(t, dlock.Options{})
	var hs []held
	for _, kd := range kinds {
		lost := new(atomic.Int32)
		a, inj := faultyClient(t, dlock.Options{ReleaseTimeout: oneSend, Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) { lost.Add(1) }}})
		k := key(t) + ":" + strings.ReplaceAll(kd.name, " ", "-")
		lk, err := kd.take(t, a, k)
		if err != nil {
			t.Fatalf("%s: %v", kd.name, err)
		}
		inj.Add(faultcmd.Rule{Name: "release lost before it ran", Action: faultcmd.FailBefore,
			Err: io.ErrUnexpectedEOF, Match: faultcmd.Match{Script: kd.script}})
		if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("%s: first Unlock = %v, want ErrUnavailable", kd.name, err)
		}
		hs = append(hs, held{kd, k, lk, lost})
	}
	time.Sleep(9*time.Second + 100*time.Millisecond) // a release's tombstone would have ended
	for _, h := range hs {
		if ok, err := adminOf(t, b).ForceRelease(t.Context(), h.stolen(h.k)); !ok || err != nil {
			t.Fatalf("%s: ForceRelease = %v, %v", h.name, ok, err)
		}
		err := h.lk.Unlock(t.Context())
		if !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrTaken) || h.lost.Load() != 1 {
			t.Errorf("%s: retried Unlock = %v, Lost hook calls %d: want the loss (ErrLost, ErrTaken) and 1: ForceRelease took it before any release ran", h.name, err, h.lost.Load())
		}
	}
}
