package dlock_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/dlock-go/dlock"
)

// A waiter's queue lease is deleted when it is granted the lock, not left
// to expire: a queued waiter that holds the lock has no lease key, and
// after contended keys have been taken and released by queued waiters of
// several kinds, every waiter key left is a release tombstone ("~").
func TestGrantedWaitersLeaveNoLease(t *testing.T) {
	a, _ := newClient(t, dlock.Options{})
	b, _ := newClient(t, dlock.Options{})
	prefix := key(t)
	kinds := []primitive{nil, readers(), permits(1, 1)}
	const keys, perKey = 6, 6
	var wg sync.WaitGroup
	var holders []*dlock.Lock
	r := srv.Client(t)
	for k := range keys {
		name := fmt.Sprintf("%s:%d", prefix, k)
		kind := kinds[k%len(kinds)]
		holderKind := kind
		if k%len(kinds) == 1 {
			holderKind = nil // a writer holds: the readers queue behind it
		}
		holder, err := holderKind.Lock(t.Context(), a, name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range perKey {
			c := a
			if i%2 == 1 {
				c = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				lk, err := kind.Lock(t.Context(), c, name)
				if err != nil {
					t.Error(err)
					return
				}
				// Held: the waiter's lease is gone already.
				if v, err := r.HGet(t.Context(), adminOf(t, c).KeysFor(name).Waiters, lk.Token()).Result(); err == nil {
					t.Errorf("%s: a granted waiter's lease is still there (%q)", name, v)
				}
				if err := lk.Unlock(t.Context()); err != nil {
					t.Error(err)
				}
			}()
		}
		holders = append(holders, holder)
	}
	waitFor(t, "the waiters to queue", func() bool {
		return a.Stats().Waiting+b.Stats().Waiting == keys*perKey
	})
	for _, holder := range holders {
		if err := holder.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	var leases []string
	iter := r.Scan(t.Context(), 0, "dlock:{"+prefix+"*:waiters", 0).Iterator()
	for iter.Next(t.Context()) {
		for tok, v := range r.HGetAll(t.Context(), iter.Val()).Val() {
			leases = append(leases, iter.Val()+" "+tok+" = "+v)
		}
	}
	if len(leases) > 0 {
		t.Fatalf("%d waiter leases outlive their grants: %s", len(leases), strings.Join(leases, "; "))
	}
}
