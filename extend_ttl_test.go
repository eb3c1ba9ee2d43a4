package dlock_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// An Extend to a TTL shorter than the lock has left does not shorten it:
// the Deadline and the key's expiry stay where they were. The watchdog
// renews with the new TTL from then on, which takes effect once less than
// that is left: the lock is kept past its old expiry, on the new TTL.
func TestExtendShorterKeepsExpiry(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	ctx := t.Context()

	t.Run("renewed", func(t *testing.T) {
		lk, err := c.Lock(ctx, key(t), dlock.WithTTL(1500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Unlock(ctx)
		before := lk.Deadline()
		if err := lk.Extend(ctx, 600*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if got := lk.Deadline(); got.Before(before) {
			t.Fatalf("Deadline moved %v earlier by an Extend to a shorter TTL", before.Sub(got))
		}
		// Past the old expiry: still held, renewed with the new TTL.
		for time.Now().Before(before.Add(700 * time.Millisecond)) {
			expiresAfter(t, rdb, lk.Key(), lk)
			time.Sleep(20 * time.Millisecond)
		}
		if v, _ := rdb.Get(ctx, lk.Key()).Result(); v != lk.Token() {
			t.Fatalf("key holds %q, not the lock's token: the watchdog did not renew on the new TTL", v)
		}
		if pttl := rdb.PTTL(ctx, lk.Key()).Val(); pttl > 600*time.Millisecond {
			t.Fatalf("key TTL %v past the old expiry: not renewed with the new TTL (600ms)", pttl)
		}
	})
	t.Run("notRenewed", func(t *testing.T) {
		lk, err := c.Lock(ctx, key(t), dlock.WithTTL(6*time.Second), dlock.WithoutRenewal())
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Unlock(ctx)
		before := lk.Deadline()
		if err := lk.Extend(ctx, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if got := lk.Deadline(); got.Before(before) {
			t.Fatalf("Deadline moved %v earlier by an Extend to a shorter TTL", before.Sub(got))
		}
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			expiresAfter(t, rdb, lk.Key(), lk)
		}
		if err := lk.Extend(ctx, 8*time.Second); err != nil { // a longer one still extends
			t.Fatal(err)
		}
		if got := lk.Deadline(); !got.After(before.Add(time.Second)) {
			t.Fatalf("Deadline %v after Extend(8s), want later than %v", time.Until(got), time.Until(before))
		}
		expiresAfter(t, rdb, lk.Key(), lk)
	})
}
