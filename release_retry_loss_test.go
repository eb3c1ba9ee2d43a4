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
			a, inj := faultyClient(t, dlock.Options{Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) { lost.Add(1) }}})
			admin, _ := newClient(t, dlock.Options{})
			k := key(t)
			lk, err := a.Semaphore(k, 2).Acquire(t.Context(), 1, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if forced {
				if ok, err := admin.ForceRelease(t.Context(), k); !ok || err != nil {
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
