package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/legacy"
	"github.com/redis/go-redis/v9"
)

// A protocol that rotates the stored value on renewal (legacy) must not
// mistake its own unanswered renewal for another owner: the renewal ran on
// Redis, its reply was lost, so the key holds the new value.
func TestUnansweredRenewalOfRotatingValue(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	c, _ := newClientOn(t, rdb, dlock.Options{})
	lk, err := c.Lock(t.Context(), "k", dlock.WithProtocol(legacy.New(legacy.Options{Unit: legacy.Milliseconds})),
		dlock.WithTTL(5*time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	// One renewal first, so its script is loaded and EVALSHA alone runs it.
	if err := lk.Extend(t.Context(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	before := lk.Token()
	time.Sleep(5 * time.Millisecond) // so the renewal writes a different timestamp
	// Redis stalls: the renewal is delivered, the caller gives up waiting,
	// and Redis runs it afterwards.
	direct := s.Client(t)
	direct.Ping(t.Context()) // connected before the stall starts
	stalled := make(chan error, 1)
	go func() { stalled <- direct.Do(context.Background(), "debug", "sleep", "0.5").Err() }()
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	if err := lk.Extend(ctx, 5*time.Second); err == nil {
		t.Fatal("Extend succeeded although Redis was stalled past its context")
	}
	cancel()
	if err := <-stalled; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for direct.Get(t.Context(), "k").Val() == before { // the delayed renewal lands
		if time.Now().After(deadline) {
			t.Fatal("the renewal never reached Redis")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := lk.Extend(t.Context(), 5*time.Second); err != nil {
		t.Fatalf("Extend after an unanswered renewal = %v, want success", err)
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if direct.Exists(t.Context(), "k").Val() != 0 {
		t.Fatal("not released")
	}
}

// An Extend to a shorter TTL whose reply is lost (it runs once Redis is
// free again) cannot shorten the key's expiry: the holder keeps its
// Deadline, and the key outlives it on Redis.
func TestUnansweredShorterExtend(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	c, _ := newClientOn(t, rdb, dlock.Options{})
	lk, err := c.Lock(t.Context(), "k", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Extend(t.Context(), 10*time.Second); err != nil { // loads the script
		t.Fatal(err)
	}
	direct := s.Client(t)
	direct.Ping(t.Context())
	stalled := make(chan error, 1)
	go func() { stalled <- direct.Do(context.Background(), "debug", "sleep", "0.5").Err() }()
	time.Sleep(100 * time.Millisecond)
	before := lk.Deadline()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	if err := lk.Extend(ctx, 2*time.Second); err == nil {
		t.Fatal("Extend succeeded although Redis was stalled past its context")
	}
	cancel()
	if got := lk.Deadline(); got.Before(before) {
		t.Fatalf("deadline moved %v earlier by an unanswered Extend", before.Sub(got))
	}
	<-stalled
	// The Extend ran once Redis woke: the key still outlives the deadline.
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		expiresAfter(t, direct, "k", lk)
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}
