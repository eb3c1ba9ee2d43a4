package dlock_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// scriptCalls counts the script calls (EVALSHA, EVAL) a go-redis client
// sends: the attempts of a waiter whose retries are minutes apart.
type scriptCalls struct{ n atomic.Int64 }

func (s *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.count(cmd)
		return next(ctx, cmd)
	}
}
func (s *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			s.count(cmd)
		}
		return next(ctx, cmds)
	}
}
func (s *scriptCalls) count(cmd redis.Cmder) {
	if n := strings.ToLower(cmd.Name()); strings.HasPrefix(n, "eval") || strings.HasPrefix(n, "fcall") {
		s.n.Add(1)
	}
}

// pubsubConn returns the server's ID of the pub/sub connection of the
// client named name, and how many channels it subscribes (0, false: none).
func pubsubConn(t *testing.T, admin *redis.Client, name string) (id int64, subs int, ok bool) {
	t.Helper()
	list, err := admin.Do(t.Context(), "client", "list", "type", "pubsub").Text()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(list, "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if f["name"] != name {
			continue
		}
		id, _ = strconv.ParseInt(f["id"], 10, 64)
		subs, _ = strconv.Atoi(f["sub"])
		return id, subs, true
	}
	return 0, 0, false
}

// TestHandoffsNotCountingRedials: a queued waiter woken because the
// Client's pub/sub connection dropped retries, but that wake-up is no
// hand-off: Stats.Handoffs counts only the hand-off the release sends it.
func TestHandoffsNotCountingRedials(t *testing.T) {
	name := "dlock-" + key(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ClientName: name})
	calls := &scriptCalls{}
	rdb.AddHook(calls)
	c, _ := newClientOn(t, rdb, slowRetry)
	other, admin := newClient(t, dlock.Options{})
	ctx := context.Background()
	k := key(t)
	held, err := other.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var lk *dlock.Lock
	go func() {
		var err error
		lk, err = c.Lock(ctx, k)
		done <- err
	}()
	waitFor(t, "the queued waiter", func() bool { return c.Stats().Waiting == 1 })
	var id int64
	waitFor(t, "the pub/sub connection", func() bool {
		var subs int
		var ok bool
		id, subs, ok = pubsubConn(t, admin, name)
		return ok && subs > 0
	})
	before, attempts := c.Stats().Handoffs, calls.n.Load()

	if err := admin.Do(ctx, "client", "kill", "id", id).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the waiter's retry after the connection dropped", func() bool { return calls.n.Load() > attempts })
	waitFor(t, "the new pub/sub connection", func() bool {
		newID, subs, ok := pubsubConn(t, admin, name)
		return ok && newID != id && subs > 0
	})
	// The reconnected connection wakes the waiter once more: let it retry.
	attempts = calls.n.Load()
	time.Sleep(200 * time.Millisecond)
	waitFor(t, "the waiter's retries to settle", func() bool {
		n := calls.n.Load()
		if n == attempts {
			return true
		}
		attempts = n
		time.Sleep(200 * time.Millisecond)
		return false
	})
	if n := c.Stats().Handoffs; n != before {
		t.Fatalf("Handoffs moved by %d on the pub/sub connection's drop: no lock was handed off", n-before)
	}
	if c.Stats().Waiting != 1 {
		t.Fatal("the waiter left the queue")
	}

	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the hand-off was not heard on the new pub/sub connection")
	}
	if n := c.Stats().Handoffs; n != before+1 {
		t.Errorf("Handoffs moved by %d on one hand-off, want 1", n-before)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
