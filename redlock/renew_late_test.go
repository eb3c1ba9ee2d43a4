package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// A renewal for a short TTL that reaches a majority of the nodes late,
// after a later and longer renewal confirmed a later Deadline, must not cut
// the lock short there: a majority of the nodes keeps the key past the
// Deadline, and another Client cannot take the lock before it.
func TestLateShortRenewal(t *testing.T) {
	ctx := t.Context()
	var nodes []redis.UniversalClient
	var injs []*faultcmd.Injector
	for _, s := range shared {
		n, inj := nodeClient(s.Addr()), faultcmd.New()
		n.AddHook(inj)
		t.Cleanup(func() { _ = n.Close() })
		nodes, injs = append(nodes, n), append(injs, inj)
	}
	a, p, err := redlock.NewClient(nodes, redlock.Options{NodeTimeout: 2 * time.Second}, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	b := newSet(t, shared, redlock.Options{NodeTimeout: 2 * time.Second}, dlock.Options{RetryInterval: 10 * time.Second})
	k := key(t)
	lk, err := a.TryLock(ctx, k, dlock.WithProtocol(p), dlock.WithTTL(10*time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(context.Background())
	if err := lk.Extend(ctx, 10*time.Second); err != nil { // loads renew.lua on every node
		t.Fatal(err)
	}
	// The 1s renewal reaches two nodes of three (a majority) late.
	for _, inj := range injs[:2] {
		inj.Add(faultcmd.Rule{Name: "1s renewal lands after the 30s one", Action: faultcmd.Late,
			Match: faultcmd.Match{Cmd: "evalsha", Key: k, Arg: "1000"},
			Until: faultcmd.Match{Cmd: "evalsha", Key: k, Arg: "30000"}})
	}
	if err := lk.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Extend(1s) = %v, want ErrUnavailable (no majority answered)", err)
	}
	if err := lk.Extend(ctx, 30*time.Second); err != nil {
		t.Fatalf("Extend(30s) = %v", err)
	}
	for _, inj := range injs[:2] {
		lateLanded(t, inj)
	}
	for end := time.Now().Add(1500 * time.Millisecond); ; time.Sleep(50 * time.Millisecond) {
		if n := outliving(t, k, lk); n < p.Quorum() {
			t.Fatalf("%d nodes keep the key past the Deadline (in %v), want a majority (%d)",
				n, time.Until(lk.Deadline()).Round(time.Millisecond), p.Quorum())
		}
		if o, err := b.c.TryLock(ctx, k, dlock.WithProtocol(b.p)); !errors.Is(err, dlock.ErrNotAcquired) {
			if err == nil {
				_ = o.Unlock(ctx)
			}
			t.Fatalf("another Client's TryLock = %v while the lock is held until %v: two holders",
				err, time.Until(lk.Deadline()).Round(time.Millisecond))
		}
		if time.Now().After(end) {
			return
		}
	}
}

// outliving counts the nodes whose key k expires no sooner than lk's
// Deadline (read first: a renewal confirmed later may move it later).
func outliving(t *testing.T, k string, lk *dlock.Lock) int {
	t.Helper()
	if err := lk.Err(); err != nil {
		t.Fatalf("the lock ended: %v", err)
	}
	dl, n := lk.Deadline(), 0
	for _, s := range shared {
		c := nodeClient(s.Addr())
		pttl, err := c.PTTL(t.Context(), k).Result()
		read := time.Now() // the node read the TTL before this
		_ = c.Close()
		if err == nil && !read.Add(pttl+time.Millisecond).Before(dl) {
			n++
		}
	}
	return n
}

// lateLanded waits until a Late command of inj has been sent.
func lateLanded(t *testing.T, inj *faultcmd.Injector) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		for _, e := range inj.Log() {
			if e.Action != faultcmd.Late || !strings.HasPrefix(e.Outcome, "sent") {
				continue
			}
			if strings.Contains(e.Outcome, "NOSCRIPT") || strings.Contains(e.Outcome, "ERR") {
				t.Fatalf("the late command failed: %s", e.Outcome)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the late command never landed")
		}
	}
}
