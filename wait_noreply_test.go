package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/outcome"
	"github.com/redis/go-redis/v9"
)

// TestWaitNoReplyCause: a Lock waiting for a held key whose Redis stops
// answering (SIGSTOP: it accepts connections, answers nothing) returns,
// when its context ends, ErrContextDone with the deadline and a cause that
// says Redis did not reply (ErrNoReply, ErrUnavailable), on one line: a
// caller can tell "still held" from "no answer".
func TestWaitNoReplyCause(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	holder, _ := newClientOn(t, s.NewClient(), dlock.Options{})
	k := key(t)
	if _, err := holder.Lock(context.Background(), k, dlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Frequent retries: an attempt is in flight when the deadline comes.
	waiter, _ := newClientOn(t, redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true}),
		dlock.Options{RetryInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx, k)
		done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for waiter.Stats().Waiting == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the Lock call never waited")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Resume() })
	err := <-done
	for _, target := range []error{dlock.ErrContextDone, context.DeadlineExceeded, dlock.ErrNoReply, dlock.ErrUnavailable} {
		if !errors.Is(err, target) {
			t.Errorf("errors.Is(%q, %v) = false", err, target)
		}
	}
	if msg := err.Error(); strings.ContainsAny(msg, "\r\n") || !strings.Contains(msg, "no reply") {
		t.Errorf("want one line that says no reply came: %q", msg)
	}
	if outcome.Of(err) != outcome.Timeout {
		t.Errorf("outcome %v, want timeout", outcome.Of(err))
	}
}

// TestWaitStillHeldNoCause: a Lock that waits for a key held all along, on
// a Redis that answers, returns ErrContextDone without a Redis cause.
func TestWaitStillHeldNoCause(t *testing.T) {
	c, _ := newClient(t, dlock.Options{RetryInterval: 20 * time.Millisecond})
	k := key(t)
	lk, err := c.Lock(context.Background(), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Unlock(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx, k)
	if !errors.Is(err, dlock.ErrContextDone) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrContextDone with the deadline", err)
	}
	if errors.Is(err, dlock.ErrNoReply) || errors.Is(err, dlock.ErrUnavailable) {
		t.Errorf("a healthy Redis reported as failing: %q", err)
	}
	if want := "dlock: context done before the lock was acquired: context deadline exceeded"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}
