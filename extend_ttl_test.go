package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// An Extend to a shorter TTL moves the lock's deadline and renewal
// earlier. The watchdog must renew it on the new schedule (it keeps the
// lock, "renewing with the new TTL"), and a lock that is not renewed must
// be reported lost (Done closed) at its new deadline, not the old one.
func TestExtendShorterKeepsSchedule(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	ctx := t.Context()

	t.Run("renewed", func(t *testing.T) {
		lk, err := c.Lock(ctx, key(t), dlock.WithTTL(6*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Unlock(ctx)
		if err := lk.Extend(ctx, 600*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		// Past two of the new TTLs, before the old schedule's first renewal
		// (2 s): the key must still be ours.
		time.Sleep(1300 * time.Millisecond)
		if err := lk.Err(); err != nil {
			t.Fatalf("lock lost after Extend to a shorter TTL: %v", err)
		}
		if v, _ := rdb.Get(ctx, lk.Key()).Result(); v != lk.Token() {
			t.Fatalf("key holds %q, not the lock's token: the watchdog did not renew on the new TTL", v)
		}
	})
	t.Run("notRenewed", func(t *testing.T) {
		lk, err := c.Lock(ctx, key(t), dlock.WithTTL(6*time.Second), dlock.WithoutRenewal())
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Unlock(ctx)
		if err := lk.Extend(ctx, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		dl := lk.Deadline()
		select {
		case <-lk.Done():
		case <-time.After(time.Until(dl) + 500*time.Millisecond):
			t.Fatalf("Done not closed 500ms past the deadline (key exists: %v)", rdb.Exists(ctx, lk.Key()).Val())
		}
		if !errors.Is(lk.Err(), dlock.ErrLost) {
			t.Fatalf("Err = %v", lk.Err())
		}
	})
}
