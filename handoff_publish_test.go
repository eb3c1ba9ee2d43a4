package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// A hand-off message is readable by anyone who may PSUBSCRIBE (and, on a
// Cluster, crosses every node): it must identify the waiter to its own
// Client without being a token that releases anything. Before, every
// hand-off published the waiter's whole token, and ReleaseToken with it
// freed the lock the waiter had just been handed.
func TestHandoffPublishIsNotAToken(t *testing.T) {
	ctx := context.Background()
	const prefix = "hoff"
	c, rdb := newClient(t, dlock.Options{Prefix: prefix})
	ps := rdb.PSubscribe(ctx, prefix+":client:*")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription confirmed
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	go func() {
		for m := range ps.Channel() {
			mu.Lock()
			seen = append(seen, m.Payload)
			mu.Unlock()
		}
	}()

	// waitQueued waits until n waiters are queued on k.
	waitQueued := func(k string, n int64) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if l, _ := rdb.LLen(ctx, adminOf(t, c).KeysFor(k).Queue).Result(); l >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters never queued on %q", n, k)
			}
		}
	}
	// handOff holds k with first, queues waiters with each of then, and
	// releases: the waiters get k by hand-off. It returns their handles.
	handOff := func(k string, first primitive, then ...primitive) []*dlock.Lock {
		t.Helper()
		holder, err := first.TryLock(ctx, c, k)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]*dlock.Lock, len(then))
		errs := make(chan error, len(then))
		for i, kind := range then {
			go func() {
				lk, err := kind.Lock(ctx, c, k)
				got[i] = lk
				errs <- err
			}()
			waitQueued(k, int64(i+1))
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		for range then {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		return got
	}

	ex := key(t)
	sh := key(t)
	sem := key(t)
	handles := map[string][]*dlock.Lock{
		ex:  handOff(ex, nil, nil),
		sh:  handOff(sh, nil, readers(), readers()),
		sem: handOff(sem, permits(1, 1), permits(1, 1)),
	}
	// Every hand-off was published before the waiter confirmed it; give the
	// subscriber's reader a moment to append the last ones.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= 4 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	payloads := append([]string(nil), seen...)
	mu.Unlock()
	if len(payloads) < 3 {
		t.Fatalf("saw %d hand-off messages, want at least 3 (exclusive, reader batch, semaphore)", len(payloads))
	}
	for k, lks := range handles {
		for _, lk := range lks {
			for _, p := range payloads {
				if strings.Contains(p, lk.Token()) {
					t.Errorf("hand-off message %q carries the token of %q's holder", p, k)
				}
			}
		}
	}
	// Nothing published releases the exclusive lock its waiter now holds.
	for _, p := range payloads {
		if err := adminOf(t, c).ReleaseToken(ctx, ex, p); err == nil || !errors.Is(err, dlock.ErrTaken) {
			t.Errorf("ReleaseToken(%q, published %q) = %v, want ErrTaken", ex, p, err)
		}
	}
	for k, lks := range handles {
		for _, lk := range lks {
			if err := lk.Err(); err != nil {
				t.Errorf("%q: a handle handed off is no longer held: %v", k, err)
			}
			_ = lk.Unlock(ctx)
		}
	}
}
