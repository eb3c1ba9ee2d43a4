package dlock

import (
	"context"
	"strconv"

	"github.com/dlock-go/dlock/internal/engine/counter"
	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/dlock-go/dlock/internal/stripes"
)

// Counter is a non-negative count (a stock) split over segments, each
// with its own lock, so that takers on different segments work in
// parallel instead of queueing on one lock: a segmented lock, 分段锁, as in a
// flash sale. Segment i's lock is stripe i of stripe.New(name, n)
// ("<name>:<i>"), and beside it, in the lock key's slot, live its count
// ("<prefix>:{<name>:<i>}:count") and the counter's segment count
// ("<prefix>:{<name>:<i>}:segments"), both without a TTL.
//
// All users of a Counter must use the same name and segment count: every
// operation with another count than the recorded one is refused with
// ErrSegmentMismatch before it writes. The first operation on a counter
// records its count. A counter written by an older version of this
// package has no recorded count: its first operation records its own,
// after checking that the segment counts found in Redis fit it (the
// segment one past its last must have none, and its last must have one if
// the first has), and is refused with ErrSegmentMismatch if they do not.
//
// Every write to a segment (a take, units put back, Set) is made by a
// script that checks the segment's lock token first, so a write that lands
// after its caller's lock ended (a pause past the TTL, a ForceRelease, a
// command delayed in the network) changes nothing: the count never goes
// below zero, nothing is sold twice, and no sold unit is put back on sale.
// It is safe for concurrent use.
type Counter struct {
	c    *Client
	name string
	segs stripes.Set
	rs   *counter.Segments // its Redis side (nil: c is nil)
	err  error             // a bad argument of Client.Counter, returned by every method
}

// Counter returns the counter name split over segments segments. It makes
// no Redis call and returns no error (see Client): a bad argument is
// returned by Set, Take and Total, each time: ErrInvalidCount for
// segments < 1, ErrEmptyKey or ErrKeyTooLong for the name (as stripe.New).
func (c *Client) Counter(name string, segments int) *Counter {
	s := &Counter{c: c, name: name, segs: stripes.Make(name, max(segments, 1))}
	if c == nil {
		s.err = ErrNilClient
		return s
	}
	s.err = validStripes(name, segments)
	given := s.segs.Len()
	s.rs = &counter.Segments{Exec: c.exec, Prefix: c.opts.Prefix, Set: s.segs,
		TTL: c.opts.TTL, ReleaseTimeout: c.opts.ReleaseTimeout,
		Mismatch: func(recorded int64) error {
			return &segmentMismatchError{name: name, given: given, recorded: recorded}
		},
		MaybeApplied: func(op, key string, n int64, cause error) error {
			return &maybeAppliedError{op: op, key: key, n: n, cause: cause}
		}}
	return s
}

// check returns the error every method of s returns before it acts: a bad
// argument of Client.Counter, or ErrNilClient for a nil *Counter.
func (s *Counter) check() error {
	if s == nil || s.c == nil {
		return ErrNilClient
	}
	return s.err
}

// validStripes checks the name and count of n stripes (see stripe.New).
func validStripes(name string, n int) error {
	if n < 1 {
		return ErrInvalidCount
	}
	if name == "" {
		return ErrEmptyKey
	}
	return validKey("", name+":"+strconv.Itoa(n-1))
}

func init() { keyrules.ValidStripes = validStripes }

// Set sets the total to total, spread evenly over the segments (the first
// total mod n get one more). It holds every segment's lock meanwhile
// (LockMulti), so it never races a Take, and writes each segment only
// while it still holds that segment's lock: a segment whose lock was lost
// meanwhile (a ForceRelease, or Set paused past its TTL) keeps its count,
// and Set returns the loss (ErrLost). total < 0 is ErrInvalidCount.
func (s *Counter) Set(ctx context.Context, total int64) error {
	if err := s.check(); err != nil {
		return err
	}
	if ctx == nil {
		return ErrNilContext
	}
	if total < 0 {
		return ErrInvalidCount
	}
	keys := make([]string, s.segs.Len())
	for i := range keys {
		keys[i] = s.segs.Stripe(i)
	}
	lk, err := s.c.LockMulti(ctx, keys)
	if err != nil {
		return err
	}
	return s.c.run(ctx, lk, func(ctx context.Context) error { return s.rs.SetAll(ctx, lk.Token(), lk.Err, total) })
}

// Total returns the sum of the segments (not atomic across them: a
// snapshot while takers run is approximate). It writes nothing: on a
// counter without a recorded segment count it checks the counts found as
// the first operation does (ErrSegmentMismatch).
func (s *Counter) Total(ctx context.Context) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if ctx == nil {
		return 0, ErrNilContext
	}
	return s.rs.Total(ctx)
}
