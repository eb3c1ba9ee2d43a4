package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/errs"
	"strconv"

	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/stripes"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
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
	err  error // a bad argument of Client.Counter, returned by every method
}

// Counter returns the counter name split over segments segments. It makes
// no Redis call and returns no error (see Client): a bad argument is
// returned by Set, Take and Total, each time: ErrInvalidCount for
// segments < 1, ErrEmptyKey or ErrKeyTooLong for the name (as stripe.New).
func (c *Client) Counter(name string, segments int) *Counter {
	s := &Counter{c: c, name: name, segs: stripes.Make(name, max(segments, 1))}
	if c == nil {
		s.err = ErrNilClient
	} else {
		s.err = validStripes(name, segments)
	}
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

// Replies of counter_add.lua and counter_set.lua besides codeOK and
// codeWrongType.
const (
	codeNotHolder  = -1 // the caller does not hold the segment's lock
	codeMismatch   = -3 // another segment count is recorded
	codeUnrecorded = -4 // no segment count is recorded yet
)

func (s *Counter) countKey(i int) string {
	return auxOf(s.c.keysFor(s.segs.Stripe(i)), countSuffix)
}

func (s *Counter) segsKey(i int) string {
	return auxOf(s.c.keysFor(s.segs.Stripe(i)), segsSuffix)
}

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
	return s.c.run(ctx, lk, func(ctx context.Context) error { return s.setAll(ctx, lk, total) })
}

// setAll writes every segment's share of total under lk, after recording
// the segment count if the counter has none.
func (s *Counter) setAll(ctx context.Context, lk *Lock, total int64) error {
	res, err := s.setSegments(ctx, lk, total)
	if err == nil && slicesHaveCode(res, codeUnrecorded) {
		if err = s.record(ctx); err == nil {
			res, err = s.setSegments(ctx, lk, total)
		}
	}
	if err != nil {
		return err
	}
	for i, r := range res {
		if len(r) == 2 && r[0] == codeOK {
			continue
		}
		return s.replyErr(lk, i, r)
	}
	return nil
}

// setSegments runs counter_set.lua for every segment in one pipeline and
// returns the replies.
func (s *Counter) setSegments(ctx context.Context, lk *Lock, total int64) ([][]int64, error) {
	n := int64(s.segs.Len())
	segs := strconv.Itoa(s.segs.Len())
	calls := make([]protocol.Call, n)
	for i := range n {
		v := total / n
		if i < total%n {
			v++
		}
		calls[i] = protocol.Call{Script: scripts.CounterSet,
			Keys: []string{s.segs.Stripe(int(i)), s.countKey(int(i)), s.segsKey(int(i))},
			Args: []any{lk.Token(), v, segs}}
	}
	res := make([][]int64, n)
	for i, cmd := range s.c.exec.Batch(ctx, calls) {
		r, err := cmd.Int64Slice()
		if err != nil {
			return nil, errs.Unavailable(err)
		}
		res[i] = r
	}
	return res, nil
}

// slicesHaveCode reports whether a reply in res has the code code.
func slicesHaveCode(res [][]int64, code int64) bool {
	for _, r := range res {
		if len(r) == 2 && r[0] == code {
			return true
		}
	}
	return false
}

// replyErr is the error of a counter script's reply r other than done or
// not enough, for segment seg under lk.
func (s *Counter) replyErr(lk *Lock, seg int, r []int64) error {
	switch {
	case len(r) != 2:
	case r[0] == codeNotHolder:
		if lerr := lk.Err(); lerr != nil {
			return lerr
		}
		return errs.Lost(s.segs.Stripe(seg), ErrTaken)
	case r[0] == codeWrongType:
		return ErrWrongType
	case r[0] == codeMismatch:
		return &segmentMismatchError{name: s.name, given: s.segs.Len(), recorded: r[1]}
	}
	return errors.New("dlock: unexpected reply from the counter script")
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
	n := s.segs.Len()
	counts := make([]*redis.StringCmd, n+1) // and the count one past the last segment
	recs := make([]*redis.StringCmd, n)
	_, err := s.c.exec.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range recs {
			counts[i] = p.Get(ctx, s.countKey(i))
			recs[i] = p.Get(ctx, s.segsKey(i))
		}
		counts[n] = p.Get(ctx, s.countKey(n))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, errs.Unavailable(err)
	}
	if err := s.checkRead(counts, recs); err != nil {
		return 0, err
	}
	var sum int64
	for _, cmd := range counts[:n] {
		if v, err := cmd.Int64(); err == nil {
			sum += v
		}
	}
	return sum, nil
}
