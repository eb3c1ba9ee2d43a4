// joining.go owns the one rule of protocols whose grants join a hold
// already on the key: an attempt does not join a hold that a handle this
// Client gave up on may still be part of.

package engine

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/dlock-go/dlock/internal/errs"
)

// Joiner is a protocol whose grant can join a hold already on the key (a
// reentrant owner's, the readers'). An attempt whose reply was lost may
// have added a handle to that hold; its withdrawal runs in the background.
// A later attempt of the same owner would join the hold that handle keeps
// alive and get its fence, and the hold would outlive the caller's last
// Unlock until the withdrawal lands. So a Joiner's attempts on a key first
// wait for this Client's withdrawals in flight on that key.
type Joiner interface {
	JoinsHolds()
}

// withdrawals counts the withdrawals in flight per lock key, for Joiner
// protocols (see awaitWithdrawals).
type withdrawals struct {
	n    atomic.Int32 // in flight on any key: the attempts' fast path
	mu   sync.Mutex
	keys map[string]*inflight
}

type inflight struct {
	n    int
	done chan struct{} // closed when n drops to 0
}

// start records a withdrawal on key and returns the function that ends it.
func (w *withdrawals) start(key string) (end func()) {
	w.mu.Lock()
	if w.keys == nil {
		w.keys = map[string]*inflight{}
	}
	f := w.keys[key]
	if f == nil {
		f = &inflight{done: make(chan struct{})}
		w.keys[key] = f
	}
	f.n++
	w.n.Add(1)
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.n.Add(-1)
			if f.n--; f.n == 0 {
				delete(w.keys, key)
				close(f.done)
			}
		})
	}
}

// await returns once no withdrawal is in flight on key, or with ctx's
// error when ctx ends first.
func (w *withdrawals) await(ctx context.Context, key string) error {
	for w.n.Load() != 0 {
		w.mu.Lock()
		f := w.keys[key]
		w.mu.Unlock()
		if f == nil {
			return nil
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return errs.CtxDone(ctx)
		}
	}
	return nil
}
