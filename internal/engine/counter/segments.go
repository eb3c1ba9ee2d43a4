package counter

import (
	"context"
	"errors"
	"strconv"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// A counter's segment count is recorded beside each of its segments (in
// the segment's slot, so every script that writes a segment checks it in
// the same run). It is written once, by record, and never changed.

// record records the counter's segment count beside every segment that has
// none, after checkShape. Segment 0's comes first, alone: of two callers
// with different counts, only the first to record it there records any
// other segment's, so the records never disagree.
func (s *Segments) record(ctx context.Context) error {
	if err := s.checkShape(ctx); err != nil {
		return err
	}
	if err := s.recorded(s.Exec.Run(ctx, s.recordCall(0))); err != nil {
		return err
	}
	calls := make([]protocol.Call, 0, s.Set.Len()-1)
	for i := 1; i < s.Set.Len(); i++ {
		calls = append(calls, s.recordCall(i))
	}
	if len(calls) == 0 {
		return nil
	}
	for _, cmd := range s.Exec.Batch(ctx, calls) {
		if err := s.recorded(cmd); err != nil {
			return err
		}
	}
	return nil
}

// recordCall is counter_segments.lua for segment i.
func (s *Segments) recordCall(i int) protocol.Call {
	return protocol.Call{Script: scripts.CounterSegments, Keys: []string{s.segsKey(i)},
		Args: []any{strconv.Itoa(s.Set.Len())}}
}

// recorded checks the reply of counter_segments.lua: the count recorded.
func (s *Segments) recorded(cmd *redis.Cmd) error {
	n, err := cmd.Int64()
	switch {
	case err != nil:
		return errs.Unavailable(err)
	case n == codeWrongType:
		return errs.ErrWrongType
	case n != int64(s.Set.Len()):
		return s.Mismatch(n)
	}
	return nil
}

// checkShape checks that the segment counts in Redis fit the counter's
// segment count n, before it is recorded. A count recorded beside segment
// 0 must be n, and then nothing else is checked. With none (a counter
// written by an older version, whose Set wrote every segment's count and
// nothing deleted one), a counter of n segments has counts 0 to n-1 or
// none: the one past the last must be absent, and the last present if the
// first is.
func (s *Segments) checkShape(ctx context.Context) error {
	n := s.Set.Len()
	var first, last, past *redis.IntCmd
	var rec *redis.StringCmd
	_, err := s.Exec.Pipelined(ctx, func(p redis.Pipeliner) error {
		first = p.Exists(ctx, s.CountKey(0))
		last = p.Exists(ctx, s.CountKey(n-1))
		past = p.Exists(ctx, s.CountKey(n))
		rec = p.Get(ctx, s.segsKey(0))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return errs.Unavailable(err)
	}
	if r, err := rec.Int64(); err == nil {
		// Segment 0's record decides: it is written first, so the other
		// segments' records (some may be missing: a record whose reply was
		// lost) can only agree with it, and counts a partial Set left
		// (a segment whose lock was lost) are no sign of another count.
		if r != int64(n) {
			return s.Mismatch(r)
		}
		return nil
	}
	if past.Val() > 0 || first.Val() > last.Val() {
		return s.Mismatch(0)
	}
	return nil
}

// checkRead checks what Total read: the segments' counts (and the count
// one past the last) and their recorded segment counts.
func (s *Segments) checkRead(counts, recs []*redis.StringCmd) error {
	n := len(recs)
	missing := false
	for _, rec := range recs {
		v, err := rec.Result()
		switch {
		case errors.Is(err, redis.Nil):
			missing = true
			continue
		case err != nil:
			return errs.Unavailable(err)
		}
		r, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || r < 1:
			return errs.ErrWrongType
		case r != int64(n):
			return s.Mismatch(r)
		}
	}
	if recs[0].Err() == nil {
		return nil // segment 0's record decides (see checkShape)
	}
	exists := func(cmd *redis.StringCmd) bool { return cmd.Err() == nil }
	if exists(counts[n]) || (missing && exists(counts[0]) && !exists(counts[n-1])) {
		return s.Mismatch(0)
	}
	return nil
}
