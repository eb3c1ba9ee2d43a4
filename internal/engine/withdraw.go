// withdraw.go owns the withdrawal of an acquiring call's token: after an
// attempt whose outcome is unknown, and when a queued waiter gives up.

package engine

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/protocol"
)

// abandon withdraws v in the background and makes sure the next attempt
// uses a fresh token.
func (a *waitCall) abandon(v string) {
	a.withdrawIn(v)
	old := a.token
	a.token = NewToken()
	a.e.notify.Retoken(old, a.token)
}

// withdraw withdraws a queued waiter that gives up (and passes on a
// hand-off that reached it too late), for its current token.
func (a *waitCall) withdraw() {
	if a.queued {
		a.withdrawIn(a.token)
	}
}

// withdrawIn runs the withdrawal of v in the background.
func (a *waitCall) withdrawIn(v string) {
	e, p, keys := a.e, a.r.Proto, a.r.Keys
	end := func() {}
	if _, ok := p.(Joiner); ok {
		end = e.withdrawing.start(keys.Lock)
	}
	e.Background(func(ctx context.Context) error {
		defer end()
		probe.Point(probe.BeforeWithdraw, keys.Lock)
		return e.withdrawRetry(ctx, p, keys, v)
	})
}

// withdrawRetry withdraws v (see withdraw) until Redis answers or ctx
// ends (the background clean-up's ReleaseTimeout), backing off from 10ms
// to 500ms: a withdrawal that fails (Redis unreachable for a moment, a
// failover) would leave what the abandoned attempt took held by nobody
// for its TTL. Retrying is safe: the withdrawal is token-checked and the
// token is never used again. A closing Client stops retrying (Close
// waits for background work).
func (e *Engine) withdrawRetry(ctx context.Context, p Protocol, keys protocol.Keys, v string) error {
	back := 10 * time.Millisecond
	for {
		err := Withdraw(ctx, e.exec, p, keys, v)
		if err == nil || ctx.Err() != nil {
			return err
		}
		e.log.Debug("dlock: withdrawal failed; retrying", "key", keys.Lock, "err", err)
		t := time.NewTimer(back)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		case <-e.closing:
			t.Stop()
			return err
		}
		back = min(2*back, 500*time.Millisecond)
	}
}
