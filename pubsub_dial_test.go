package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
)

// TestLockNotHeldUpByPubSubDial: a blocked Lock returns by its context's
// deadline while the Client's pub/sub connection cannot be dialled (a
// redial after a reset, a stalled server): the SUBSCRIBE that registers
// the waiter is sent in the background, never by the caller nor under the
// lock every waiter of the Client shares. Queued waiters (the hand-off
// channel) and listening ones (Barging: the key's wake-up channel) alike.
func TestLockNotHeldUpByPubSubDial(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts dlock.Options
	}{
		{"queued", slowRetry},
		{"barging", dlock.Options{Barging: true, RetryInterval: time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, inj := faultyClient(t, tc.opts)
			other, _ := newClient(t, dlock.Options{})
			ctx := context.Background()
			k := key(t)
			held, err := other.Lock(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Unlock(ctx)
			// One acquire first, so the next dial is the pub/sub connection's.
			warm, err := c.Lock(ctx, k+":warm")
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			inj.Add(faultcmd.Rule{Name: "dial stalls", Action: faultcmd.Delay, Delay: 30 * time.Second,
				Match: faultcmd.Match{Cmd: "dial"}, Times: -1})

			done := make(chan error, 1)
			go func() {
				lctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				_, err := c.Lock(lctx, k)
				done <- err
			}()
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Lock did not return by its context's deadline: it waits for the pub/sub dial")
			}
			if !errors.Is(err, dlock.ErrContextDone) {
				t.Fatalf("Lock: %v, want ErrContextDone", err)
			}
			for _, e := range inj.Log() {
				if e.Command.Name == "dial" && e.Action == faultcmd.Delay {
					t.Fatalf("Lock returned only after the stalled dial (%s)", e)
				}
			}
		})
	}
}
