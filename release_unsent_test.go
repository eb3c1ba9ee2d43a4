package dlock_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/probe"
)

// An Unlock that waits for a renewal in flight (the watchdog holds the
// lease while its reply is applied), past the lease's deadline, still
// sends its release: the renewal ran on the server and moved the handle's
// lease out, so a release skipped as "its deadline passed" would leave the
// handle held there, keeping the owner's reentrant hold alive after every
// Unlock returned nil (the owner's next Lock joined it, with its fence).
// The fault soak found it (S3, a reentrant lock under DEBUG SLEEP).
func TestUnlockBehindRenewalPastDeadlineReleases(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	k := key(t)
	var armed atomic.Bool
	paused, proceed := make(chan struct{}), make(chan struct{})
	defer probe.Set(func(name, _ string) {
		if name == probe.WatchdogAfterBatch && armed.CompareAndSwap(true, false) {
			close(paused) // the renewal ran on the server; its reply is not applied yet
			<-proceed
		}
	})()
	lk, err := c.Reentrant(k).Lock(t.Context(), "owner", dlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	select {
	case <-paused:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal")
	}
	dl := lk.Deadline() // the renewal has not moved it
	res := make(chan error, 1)
	go func() { res <- lk.Unlock(t.Context()) }()
	time.Sleep(time.Until(dl) + 50*time.Millisecond) // the deadline timer fires while Unlock waits
	close(proceed)
	if err := <-res; err != nil {
		t.Fatalf("Unlock = %v, want nil", err)
	}
	if n, err := rdb.Exists(t.Context(), k).Result(); err != nil || n != 0 {
		pttl, _ := rdb.PTTL(t.Context(), k).Result()
		t.Fatalf("after Unlock returned nil the key exists (%d, %v, PTTL %v): the release was never sent", n, err, pttl)
	}
	lk2, err := c.Reentrant(k).TryLock(t.Context(), "owner")
	if err != nil {
		t.Fatal(err)
	}
	defer lk2.Unlock(t.Context())
	if lk2.Fence() == lk.Fence() {
		t.Fatalf("the owner's next handle joined the hold every Unlock ended (fence %d)", lk.Fence())
	}
}
