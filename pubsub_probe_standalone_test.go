package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// probeHook acts on the PUBLISHes (and a Cluster's SPUBLISHes) of
// liveness probes: fail makes them fail (Redis down or slow), swallow
// answers them without sending them (the command path reaches a node the
// subscription is not on).
type probeHook struct{ fail, swallow atomic.Bool }

func (h *probeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *probeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *probeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if len(a) == 3 && (strings.EqualFold(cmd.Name(), "publish") || strings.EqualFold(cmd.Name(), "spublish")) {
			if p, _ := a[2].(string); strings.HasPrefix(p, dlock.ProbePrefix) {
				switch {
				case h.fail.Load():
					err := errors.New("injected: PUBLISH failed")
					cmd.SetErr(err)
					return err
				case h.swallow.Load():
					cmd.(*redis.IntCmd).SetVal(0)
					return nil
				}
			}
		}
		return next(ctx, cmd)
	}
}

// TestPubSubProbeRedials: on one server, with the probes' PUBLISHes
// answered but never delivered, the Client replaces its pub/sub
// connection (once per probe period at most), wakes its waiters, and the
// new connection hears the next release; a probe whose PUBLISH fails makes
// no redial. Queued waiters (the own channel) and listening ones (Barging:
// the key's wake-up channel, the own channel subscribed for the probe).
func TestPubSubProbeRedials(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts dlock.Options
	}{
		{"queued", slowRetry},
		{"barging", dlock.Options{Barging: true, RetryInterval: time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const every = 200 * time.Millisecond
			rdb := srv.NewClient()
			h := &probeHook{}
			rdb.AddHook(h)
			calls := &scriptCalls{}
			rdb.AddHook(calls)
			c, _ := newClientOn(t, rdb, tc.opts)
			dlock.SetPubSubProbe(c, every, every)
			other, _ := newClient(t, dlock.Options{})
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
			waitFor(t, "the waiter", func() bool { return c.Stats().Waiting == 1 })

			h.fail.Store(true)
			time.Sleep(10 * every)
			if n := c.Stats().PubSubRedials; n != 0 {
				t.Fatalf("%d redials while the probes' PUBLISH failed: an error is no stale subscription", n)
			}
			h.fail.Store(false)
			h.swallow.Store(true)
			attempts := calls.n.Load()
			waitFor(t, "a redial", func() bool { return c.Stats().PubSubRedials >= 1 })
			start := time.Now()
			time.Sleep(10 * every)
			if n, max := c.Stats().PubSubRedials, uint64(time.Since(start)/every)+2; n > max {
				t.Errorf("%d redials in %v with a probe every %v", n, time.Since(start).Round(time.Millisecond), every)
			}
			// Retries are a minute apart: an attempt now is the redial's
			// wake-up.
			if calls.n.Load() == attempts {
				t.Error("the redial woke no waiter")
			}
			if n := c.Stats().Handoffs; n != 0 {
				t.Errorf("Handoffs = %d after redials: no lock was handed off", n)
			}
			h.swallow.Store(false)
			// Let the last redial's subscriptions be confirmed: the release
			// below must be heard on the new connection.
			time.Sleep(4 * every)
			redials := c.Stats().PubSubRedials
			if err := held.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the release was not heard on the new pub/sub connection")
			}
			if n := c.Stats().PubSubRedials; n != redials {
				t.Errorf("%d more redials with the probes delivered", n-redials)
			}
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
