package fenced

import (
	"errors"
	"fmt"

	"github.com/dlock-go/dlock"
)

// ErrStale: a fenced write was refused because the resource has already
// accepted a newer fence (or the same fence from another owner). The
// writer's lock is no longer valid: it must stop acting as the holder.
// Set and Delete return it as a *StaleError.
var ErrStale = errors.New("dlock: stale fence: the resource has accepted a newer one")

// ErrSuperseded: a fenced write was not applied because a later write
// of the same grant (the same fence and owner) had already been: the
// write reached Redis after its successor, as a write whose reply was
// lost can. The resource keeps the later write, and the writer's fence
// is still the newest the resource has accepted: its lock is not lost.
// Do not repeat the write: a repeated write is a new, later one and
// would overwrite its successor.
var ErrSuperseded = errors.New("dlock: fenced write superseded by a later write of the same grant")

// StaleError reports a fenced write refused by the resource. It matches
// ErrStale.
type StaleError struct {
	Key   string // the resource key
	Fence uint64 // the fence the caller wrote with
	Last  uint64 // the fence the resource had accepted last (>= Fence)
}

func (e *StaleError) Error() string {
	if e.Last == e.Fence {
		return fmt.Sprintf("%v: %q already accepted fence %d from another owner", ErrStale, e.Key, e.Last)
	}
	return fmt.Sprintf("%v: %q accepted fence %d, caller has %d", ErrStale, e.Key, e.Last, e.Fence)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// argError is a bad-input error of this package: it matches
// dlock.ErrInvalidArgument, like dlock's own.
type argError string

func (e argError) Error() string        { return "dlock: invalid argument: " + string(e) }
func (e argError) Is(target error) bool { return target == dlock.ErrInvalidArgument }

var (
	errZeroFence  error = argError("fence 0: the lock's protocol has no fencing tokens")
	errEmptyOwner error = argError("empty owner")
)
