package outcome_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/outcome"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want outcome.Outcome
	}{
		{nil, outcome.OK},
		{&dlock.NotAcquiredError{Key: "k"}, outcome.NotAcquired},
		{errors.Join(dlock.ErrContextDone, context.DeadlineExceeded), outcome.Timeout},
		{errors.Join(dlock.ErrContextDone, context.Canceled), outcome.Canceled},
		{errors.Join(dlock.ErrLost, dlock.ErrExpired), outcome.Expired},
		{errors.Join(dlock.ErrLost, dlock.ErrTaken, dlock.ErrWrongType), outcome.Taken},
		{errors.Join(dlock.ErrLost, dlock.ErrUnreachable, errors.New("i/o timeout")), outcome.Unreachable},
		{fmt.Errorf("%w: boom", dlock.ErrUnavailable), outcome.Error},
		{dlock.ErrClosed, outcome.Error},
		{dlock.ErrEmptyKey, outcome.Error},
	} {
		if got := outcome.Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	seen := map[string]bool{}
	for o := range outcome.Outcome(outcome.Count) {
		s := o.String()
		if seen[s] || s == "" {
			t.Errorf("Outcome %d: name %q repeated or empty", o, s)
		}
		seen[s] = true
		if want := o == outcome.Expired || o == outcome.Taken || o == outcome.Unreachable; o.Lost() != want {
			t.Errorf("%v.Lost() = %v", o, o.Lost())
		}
	}
	if s := outcome.Outcome(outcome.Count).String(); s != fmt.Sprintf("Outcome(%d)", outcome.Count) {
		t.Errorf("out of range: %q", s)
	}
}

func ExampleOf() {
	// Count events by outcome, as a metrics adapter's hooks would with
	// the Err of each AcquireInfo.
	var byOutcome [outcome.Count]int
	for _, err := range []error{
		nil,
		&dlock.NotAcquiredError{Key: "k"},
		errors.Join(dlock.ErrContextDone, context.DeadlineExceeded),
		nil,
	} {
		byOutcome[outcome.Of(err)]++
	}
	fmt.Println(byOutcome[outcome.OK], byOutcome[outcome.NotAcquired], byOutcome[outcome.Timeout])
	fmt.Println(outcome.Of(errors.Join(dlock.ErrLost, dlock.ErrTaken)), outcome.Taken.Lost())
	// Output:
	// 2 1 1
	// taken true
}
