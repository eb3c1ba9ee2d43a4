package legacy_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/legacy"
)

// The value now+timeout+1 is the same for every client locking in the same
// second with the same timeout, so after a SETNX whose reply was lost the
// key holding that value says nothing about who wrote it. Before, the
// engine deleted it ("nobody else can hold v") and so freed the lock of
// the client that did hold it: a third client then got in beside it.
func TestLostSetNXReplyKeepsOthersLock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	t0 := time.Now().Truncate(time.Second)
	p := legacy.New(legacy.Options{Unit: legacy.Seconds, Clock: func() time.Time { return t0 }})
	k := key(t)

	holder, _ := newDlock(t, dlock.Options{})
	lk, err := holder.TryLock(ctx, k, with(p, time.Minute, dlock.WithoutRenewal())...)
	if err != nil {
		t.Fatal(err)
	}
	v := lk.Token()

	// A second client, same second, same timeout: same value. Its SETNX
	// runs (and fails: the key exists), and its reply is lost.
	rdb := srv.NewClient()
	inj := faultcmd.New()
	rdb.AddHook(inj)
	drop := inj.Add(faultcmd.Rule{Name: "lost SETNX reply", Action: faultcmd.DropReply,
		Match: faultcmd.Match{Cmd: "setnx", Key: k}})
	other, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.TryLock(ctx, k, with(p, time.Minute)...)
	if drop.Fired() != 1 || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryLock with its SETNX reply lost = %v (fault fired %d times), want ErrUnavailable", err, drop.Fired())
	}
	_ = other.Close() // waits for any clean-up it started
	_ = rdb.Close()

	admin := newRDB(t)
	if got, err := admin.Get(ctx, k).Result(); err != nil || got != v {
		t.Fatalf("after the other client's lost SETNX reply the key holds %q (%v); want the holder's %q", got, err, v)
	}
	third, _ := newDlock(t, dlock.Options{})
	if lk3, err := third.TryLock(ctx, k, with(p, time.Minute)...); !errors.Is(err, dlock.ErrNotAcquired) {
		if lk3 != nil {
			_ = lk3.Unlock(ctx)
		}
		t.Fatalf("a third client's TryLock while the holder holds the key = %v, want ErrNotAcquired", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatalf("the holder's Unlock: %v", err)
	}
}
