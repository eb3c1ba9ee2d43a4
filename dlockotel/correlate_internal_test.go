package dlockotel

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dlock-go/dlock"
)

// sliceErr is an error type that cannot be compared.
type sliceErr []string

func (e sliceErr) Error() string { return fmt.Sprint([]string(e)) }

// boxErr is comparable, but may hold an incomparable value.
type boxErr struct{ v any }

func (e boxErr) Error() string { return "box" }

func TestSameError(t *testing.T) {
	e1 := errors.New("x")
	joined := errors.Join(dlock.ErrContextDone, e1)
	for _, tc := range []struct {
		a, b error
		want bool
	}{
		{nil, nil, true},
		{nil, e1, false},
		{e1, nil, false},
		{e1, e1, true},
		{e1, errors.New("x"), false},
		{joined, joined, true},
		{joined, errors.Join(dlock.ErrContextDone, e1), false},
		{dlock.ErrClosed, dlock.ErrClosed, true},
		{sliceErr{"a"}, sliceErr{"a"}, false},
		{boxErr{[]int{1}}, boxErr{[]int{1}}, false}, // == would panic
		{boxErr{1}, boxErr{1}, true},
	} {
		if got := sameError(tc.a, tc.b); got != tc.want {
			t.Errorf("sameError(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestCorrelatorBounded(t *testing.T) {
	var c correlator
	c.init()
	c.beginAcquire("k")
	for i := range 3 * maxEvents {
		c.acquired(dlock.AcquireInfo{Key: "k", Fence: uint64(i + 1)})
		c.acquired(dlock.AcquireInfo{Key: "other", Fence: uint64(i + 1)}) // no call pending: dropped
	}
	if n := len(c.acq["k"].events); n != maxEvents {
		t.Errorf("%d events kept, want %d", n, maxEvents)
	}
	if _, ok := c.acq["other"]; ok {
		t.Error("events kept for a key without a pending call")
	}
	// The newest is still there; the oldest were dropped.
	if _, ok := c.endAcquire("k", 3*maxEvents, nil); !ok {
		t.Error("newest event not found")
	}
	if len(c.acq) != 0 || c.pending.Load() != 0 {
		t.Errorf("after end: %d slots, %d pending", len(c.acq), c.pending.Load())
	}
	// No call pending: events are dropped without taking the lock.
	c.acquired(dlock.AcquireInfo{Key: "k"})
	if len(c.acq) != 0 {
		t.Error("event kept with no call pending")
	}
}
