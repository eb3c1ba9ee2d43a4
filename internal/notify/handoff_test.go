package notify

import (
	"crypto/rand"
	"encoding/base64"
	"testing"
)

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// A queued waiter whose token was replaced (the engine gives up a token
// after an ambiguous acquire and retries with a fresh one) is woken by a
// hand-off to its new token, which releases publish as handoffID; the old
// token no longer wakes it.
func TestRetokenedWaiterWokenByHandoffID(t *testing.T) {
	n := New(Config{IsToken: func(string) bool { return true }})
	old, tok := token(), token()
	w := &Waiter{Channel: old, Wake: make(chan struct{}, 1)}
	n.grants[handoffKey(old)] = w
	n.Retoken(old, tok)
	n.handedOff(handoffID(old))
	select {
	case <-w.Wake:
		t.Fatal("a hand-off to the given-up token woke the waiter")
	default:
	}
	n.handedOff(handoffID(tok))
	select {
	case <-w.Wake:
	default:
		t.Fatal("the hand-off to the waiter's new token did not wake it")
	}
	if handed, granted := w.Woken(); !handed || !granted {
		t.Fatalf("woken by its hand-off: handed %v, granted %v", handed, granted)
	}
	n.Dequeue(w)
	if len(n.grants) != 0 {
		t.Fatalf("grants left after the waiter left: %v", n.grants)
	}
}
