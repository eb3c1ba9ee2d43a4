// Package outcome classifies the errors dlock's hooks report, for
// metrics and traces that count events by outcome: dlockprom's labels and
// dlockotel's attributes are named after these outcomes.
//
//	locks.AddHooks(dlock.Hooks{Acquire: func(_ context.Context, i dlock.AcquireInfo) {
//		acquires[outcome.Of(i.Err)]++ // var acquires [outcome.Count]int
//	}})
package outcome

import (
	"context"
	"errors"
	"strconv"

	"github.com/dlock-go/dlock"
)

// Outcome classifies the error an event reports (dlock.AcquireInfo.Err,
// ReleaseInfo.Err, RenewInfo.Err, LostInfo.Cause). Get it with [Of].
type Outcome uint8

// The outcomes, in the order of their values.
const (
	OK          Outcome = iota // nil: acquired, released or renewed
	NotAcquired                // dlock.ErrNotAcquired: TryLock found the key held
	Timeout                    // dlock.ErrContextDone: the ctx's deadline passed before the lock was acquired
	Canceled                   // dlock.ErrContextDone: the ctx was cancelled before the lock was acquired
	Expired                    // dlock.ErrExpired: the lock was lost, its key deleted or expired
	Taken                      // dlock.ErrTaken: the lock was lost to another owner
	Unreachable                // dlock.ErrUnreachable: the lock was lost, Redis unreachable until its deadline
	Error                      // anything else: a Redis error, a closed Client, bad input
)

// Count is the number of Outcome values: an array of this length can be
// indexed by any Outcome.
const Count = int(Error) + 1

// Of returns the Outcome of err.
func Of(err error) Outcome {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, dlock.ErrNotAcquired):
		return NotAcquired
	case errors.Is(err, dlock.ErrContextDone) && errors.Is(err, context.Canceled):
		return Canceled
	case errors.Is(err, dlock.ErrContextDone):
		return Timeout
	case errors.Is(err, dlock.ErrTaken):
		return Taken
	case errors.Is(err, dlock.ErrUnreachable):
		return Unreachable
	case errors.Is(err, dlock.ErrExpired):
		return Expired
	default:
		return Error
	}
}

// Lost reports whether o is the cause of a loss (expired, taken or
// unreachable).
func (o Outcome) Lost() bool { return o >= Expired && o <= Unreachable }

var names = [Count]string{"ok", "not_acquired", "timeout", "canceled", "expired", "taken", "unreachable", "error"}

// String returns o's name: ok, not_acquired, timeout, canceled, expired,
// taken, unreachable or error.
func (o Outcome) String() string {
	if int(o) < Count {
		return names[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}
