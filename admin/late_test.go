package admin_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
)

// A ForceRelease whose release command is delayed past its caller's
// timeout lands after the holder released and took the key again: it
// must leave that new grant alone (it was made after the operator's read),
// so no other client gets the key beside it.
func TestLateForceReleaseKeepsNewHolder(t *testing.T) {
	ctx := t.Context()
	a, adm, inj := faultyClient(t, dlock.Options{})
	b, _, rdb := newClient(t, dlock.Options{})
	k := key(t)
	lk, err := a.TryLock(ctx, k, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	inj.Add(faultcmd.Rule{Name: "ForceRelease lands after the next grant", Action: faultcmd.Late,
		Match: faultcmd.Match{Script: "release", Key: k, Arg: "force"}, Until: faultcmd.Match{Script: "acquire", Key: k}})
	if _, err := adm.ForceRelease(ctx, k); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("ForceRelease with its command late = %v, want ErrUnavailable", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	lk2, err := a.TryLock(ctx, k, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("TryLock again: %v", err)
	}
	defer lk2.Unlock(ctx)
	waitLate(t, inj)
	if got := rdb.Get(ctx, k).Val(); got != lk2.Token() {
		t.Fatalf("after the late ForceRelease the key holds %q, want the new grant's token", got)
	}
	if o, err := b.TryLock(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
		if o != nil {
			_ = o.Unlock(ctx)
		}
		t.Fatalf("another client's TryLock beside the new grant = %v, want ErrNotAcquired", err)
	}
}

// waitLate waits until a Late command of inj has been sent.
func waitLate(t *testing.T, inj *faultcmd.Injector) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		for _, e := range inj.Log() {
			if e.Action == faultcmd.Late && strings.HasPrefix(e.Outcome, "sent") {
				return
			}
		}
	}
	t.Fatal("the late command never landed")
}
