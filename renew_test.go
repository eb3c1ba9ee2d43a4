package dlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// The watchdog renews many locks in pipelined batches: 10,000 locks cost
// about 100 round trips or fewer per renewal interval, not 10,000.
func TestWatchdogBatchesRenewals(t *testing.T) {
	if testing.Short() {
		t.Skip("acquires 10,000 locks")
	}
	const n = 10000
	// Renewed every second, as a TTL of 3 s would be, with a TTL that
	// outlasts a loaded machine's stalls: acquiring 10,000 locks under
	// -race at load 10 or more takes minutes, and a 3 s TTL lost locks to
	// the machine, not to the watchdog.
	const ttl = 30 * time.Second
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 32})
	rt := &roundTrips{}
	rdb.AddHook(rt)
	c, _ := newClientOn(t, rdb, dlock.Options{RenewInterval: time.Second})
	prefix := key(t)
	locks := make([]*dlock.Lock, n)
	for i := range locks {
		lk, err := c.TryLock(t.Context(), fmt.Sprintf("%s:%d", prefix, i), dlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		locks[i] = lk
	}
	// Count round trips while the watchdog renews 2n times (two full
	// rounds at least), after acquiring is done: a count, not a duration.
	before := rt.n.Load()
	renewalsBefore := c.Stats().Renewals
	start := time.Now()
	waitFor(t, "two rounds of renewals", func() bool { return c.Stats().Renewals-renewalsBefore >= 2*n })
	trips := rt.n.Load() - before
	renewals := c.Stats().Renewals - renewalsBefore
	t.Logf("%d locks: %d renewals in %d round trips over %v", n, renewals, trips, time.Since(start).Round(time.Millisecond))
	// Round trips per round (renewing every lock once) stay at or under 100.
	if perRound := float64(trips) * n / float64(renewals); perRound > 100 {
		t.Fatalf("%.0f round trips per renewal round of %d locks, want <= 100", perRound, n)
	}
	for _, lk := range locks {
		if err := lk.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil { // releases all 10,000
		t.Fatal(err)
	}
	if got := c.Stats().Held; got != 0 {
		t.Fatalf("%d still held after Close", got)
	}
}
