package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestNilLockIsNotHeld: every method of a nil *Lock, or of a zero Lock,
// answers "not held" instead of panicking.
func TestNilLockIsNotHeld(t *testing.T) {
	ctx := t.Context()
	for name, lk := range map[string]*dlock.Lock{"nil": nil, "zero": {}} {
		if err := lk.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s: Unlock: %v", name, err)
		}
		if err := lk.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s: Extend: %v", name, err)
		}
		if err := lk.Err(); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s: Err: %v", name, err)
		}
		select {
		case <-lk.Done():
		default:
			t.Errorf("%s: Done not closed", name)
		}
		if lk.Key() != "" || lk.Keys() != nil || lk.Token() != "" || lk.Fence() != 0 ||
			lk.FenceOf("k") != 0 || !lk.Deadline().IsZero() {
			t.Errorf("%s: %q %q %q %d %d %v", name, lk.Key(), lk.Keys(), lk.Token(), lk.Fence(), lk.FenceOf("k"), lk.Deadline())
		}
	}
}
