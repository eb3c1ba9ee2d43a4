package dlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// No Renew hook call for a lock begins after that lock's Lost call began,
// but the one reporting the renewal that found the loss (its Err is the
// loss), nor after its Unlock returned: a report of an earlier renewal
// that comes late would say a lock is held that is gone. The Renew hook
// here is slow (20ms a call), so the watchdog's reports come up to a
// second late; meanwhile half the locks are lost (their keys deleted,
// found by the next renewal) and the other half unlocked.
func TestRenewHookNotAfterLostOrUnlock(t *testing.T) {
	const (
		locks  = 256
		rounds = 2
		ttl    = 300 * time.Millisecond
	)
	type record struct {
		lostAt, unlockAt int64 // seq of the Lost call's start; after Unlock returned
		renews           []int64
		errs             []error
	}
	var (
		seq  atomic.Int64
		mu   sync.Mutex
		recs = map[string]*record{}
	)
	rec := func(k string) *record { // callers hold mu
		r := recs[k]
		if r == nil {
			r = &record{}
			recs[k] = r
		}
		return r
	}
	hooks := dlock.Hooks{
		Renew: func(_ context.Context, info dlock.RenewInfo) {
			n := seq.Add(1)
			mu.Lock()
			r := rec(info.Key)
			r.renews = append(r.renews, n)
			r.errs = append(r.errs, info.Err)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		},
		Lost: func(_ context.Context, info dlock.LostInfo) {
			n := seq.Add(1)
			mu.Lock()
			if r := rec(info.Key); r.lostAt == 0 {
				r.lostAt = n
			}
			mu.Unlock()
		},
	}
	c, rdb := newClient(t, dlock.Options{Hooks: hooks})
	ctx := t.Context()
	var deleted, unlocked []string
	for range rounds {
		lks := make([]*dlock.Lock, 0, locks)
		for range locks {
			lk, err := c.TryLock(ctx, key(t), dlock.WithTTL(ttl))
			switch {
			case errors.Is(err, dlock.ErrUnavailable):
				continue // a reply after the validity: a starved machine
			case err != nil:
				t.Fatal(err)
			}
			lks = append(lks, lk)
		}
		if len(lks) < locks/2 {
			t.Skipf("%d of %d locks acquired at TTL %v: the machine is starved", len(lks), locks, ttl)
		}
		time.Sleep(700 * time.Millisecond) // renewals, reported late
		var wg sync.WaitGroup
		for i, lk := range lks {
			if i%2 == 0 {
				deleted = append(deleted, lk.Key())
				if err := rdb.Del(ctx, lk.Key()).Err(); err != nil {
					t.Fatal(err)
				}
				continue
			}
			unlocked = append(unlocked, lk.Key())
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := lk.Unlock(ctx); err != nil {
					if !errors.Is(err, dlock.ErrLost) { // lost: a starved machine
						t.Errorf("Unlock %s: %v", lk.Key(), err)
					}
					return
				}
				n := seq.Add(1)
				mu.Lock()
				rec(lk.Key()).unlockAt = n
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	// The reports queued behind the slow hook (a chunk of 64 takes 1.3s).
	time.Sleep(3 * time.Second)

	mu.Lock()
	defer mu.Unlock()
	bad := 0
	for _, k := range deleted {
		if rec(k).lostAt == 0 {
			t.Errorf("%s: deleted, and no Lost call", k)
		}
	}
	for k, r := range recs { // any lock lost, also one unlocked too late
		if r.lostAt == 0 {
			continue
		}
		for i, n := range r.renews {
			if n > r.lostAt && !errors.Is(r.errs[i], dlock.ErrLost) {
				bad++
				if bad <= 5 {
					t.Errorf("%s: Renew call (Err %v) began after Lost began", k, r.errs[i])
				}
			}
		}
	}
	for _, k := range unlocked {
		r := rec(k)
		if r.unlockAt == 0 {
			continue // Unlock found the lock lost
		}
		for i, n := range r.renews {
			if n > r.unlockAt {
				bad++
				if bad <= 5 {
					t.Errorf("%s: Renew call (Err %v) began after Unlock returned", k, r.errs[i])
				}
			}
		}
	}
	renews := 0
	for _, r := range recs {
		renews += len(r.renews)
	}
	t.Logf("%d locks, %d Renew calls, %d out of order", rounds*locks, renews, bad)
	if bad > 0 {
		t.Errorf("%d Renew calls out of order", bad)
	}
}
