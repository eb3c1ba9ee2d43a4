package dlock

import (
	"encoding/hex"
	"testing"
)

// A queued waiter whose token was replaced (the engine gives up a token
// after an ambiguous acquire and retries with a fresh one) is woken by a
// hand-off to its new token, which releases publish as handoffID; the old
// token no longer wakes it.
func TestRetokenedWaiterWokenByHandoffID(t *testing.T) {
	n := &notifier{grants: map[[20]byte]*waiter{}}
	old, tok := newToken(), newToken()
	w := &waiter{channel: old, wake: make(chan struct{}, 1)}
	n.grants[handoffKey(old)] = w
	n.retoken(old, tok)
	n.handedOff(handoffID(old))
	select {
	case <-w.wake:
		t.Fatal("a hand-off to the given-up token woke the waiter")
	default:
	}
	n.handedOff(handoffID(tok))
	select {
	case <-w.wake:
	default:
		t.Fatal("the hand-off to the waiter's new token did not wake it")
	}
	n.dropQueueWaiter(w)
	if len(n.grants) != 0 {
		t.Fatalf("grants left after the waiter left: %v", n.grants)
	}
}

// A liveness probe's payload is never taken for a hand-off: it is neither
// a hex hand-off ID nor a token, whatever its sequence number.
func TestProbePayloadIsNoHandoff(t *testing.T) {
	for _, seq := range []string{"0", "1", "18446744073709551615", "0123456789abcdef0123456789abcdef01"} {
		p := probePrefix + seq
		if _, err := hex.DecodeString(p); isToken(p) || err == nil {
			t.Fatalf("probe payload %q could name a waiter", p)
		}
	}
}
