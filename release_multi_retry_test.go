package dlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
)

// A retried Unlock of a multi-key lock after a lost release reply answers
// what the release found, as a single key's does: the loss when an
// operator's ForceRelease took one of its keys (and another owner took
// it, or nobody did) before any release ran, although the first release
// left its tombstone in that key's queue too; released when the first
// release ran on every key. In one slot and across slots.
func TestRetriedMultiUnlockAfterLostReplyTells(t *testing.T) {
	for _, oneSlot := range []bool{true, false} {
		for _, forced := range []string{"", "taken", "free"} {
			name := "across slots"
			if oneSlot {
				name = "one slot"
			}
			if forced != "" {
				name += "/force-released first, " + forced
			} else {
				name += "/released"
			}
			t.Run(name, func(t *testing.T) {
				var lost atomic.Int32
				a, inj := faultyClient(t, dlock.Options{ReleaseTimeout: oneSend, Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) { lost.Add(1) }}})
				admin, rdb := newClient(t, dlock.Options{})
				base := key(t)
				keys := []string{base + ":a", base + ":b", base + ":c"}
				if oneSlot {
					keys = []string{"{" + base + "}a", "{" + base + "}b", "{" + base + "}c"}
				}
				lk, err := a.LockMulti(t.Context(), keys, dlock.WithTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				if forced != "" {
					if ok, err := adminOf(t, admin).ForceRelease(t.Context(), keys[1]); err != nil || !ok {
						t.Fatalf("ForceRelease = %v, %v", ok, err)
					}
					if forced == "taken" {
						if _, err := admin.TryLock(t.Context(), keys[1]); err != nil {
							t.Fatalf("another owner's TryLock after ForceRelease: %v", err)
						}
					}
				}
				inj.Add(faultcmd.Rule{Name: "lost release replies", Action: faultcmd.DropReply, Times: -1,
					Match: faultcmd.Match{Script: "multi_release"}})
				if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrUnavailable) {
					t.Fatalf("first Unlock = %v, want ErrUnavailable", err)
				}
				inj.Clear()
				err = lk.Unlock(t.Context())
				if forced != "" {
					if !errors.Is(err, dlock.ErrLost) || lost.Load() != 1 {
						t.Fatalf("retried Unlock = %v, Lost hook calls %d: want the loss (ForceRelease took %s before the release ran)", err, lost.Load(), keys[1])
					}
				} else if err != nil || !errors.Is(lk.Err(), dlock.ErrReleased) || lost.Load() != 0 {
					t.Fatalf("retried Unlock = %v, Err = %v, Lost hook calls %d: want nil, ErrReleased and none", err, lk.Err(), lost.Load())
				}
				for i, k := range keys {
					n, err := rdb.Exists(t.Context(), k).Result()
					if want := int64(0); forced == "taken" && i == 1 {
						want = 1
						if n != want || err != nil {
							t.Fatalf("%s (the other owner's) after the Unlocks: exists %d, %v", k, n, err)
						}
					} else if n != want || err != nil {
						t.Fatalf("%s after the Unlocks: exists %d, %v", k, n, err)
					}
				}
			})
		}
	}
}
