// Package counter holds the Redis side of package dlock's Counter: the
// names of its segments' keys, the calls of its scripts (counter_set.lua,
// counter_add.lua, counter_segments.lua), the segment counts recorded
// beside each segment, and the reading of the total. The root package
// keeps the Counter users see: its arguments, its locks (LockMulti for
// Set, TryLock and Lock for Take) and what runs under them.
package counter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/stripes"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Replies of counter_add.lua and counter_set.lua.
const (
	codeOK         = protocol.ReplyOK
	codeWrongType  = protocol.ReplyWrongType
	codeNotHolder  = -1 // the caller does not hold the segment's lock
	codeMismatch   = -3 // another segment count is recorded
	codeUnrecorded = -4 // no segment count is recorded yet
)

// Segments is a counter split over the segments of Set, as its scripts
// see it, on the Client's executor under the Client's prefix.
type Segments struct {
	Exec   *rexec.Exec
	Prefix string
	Set    stripes.Set
	// TTL is the Client's TTL: a take's call sends no copy after it (see
	// addOnce). ReleaseTimeout bounds putting units back.
	TTL, ReleaseTimeout time.Duration
	// Mismatch is the error of a counter whose segment count is not
	// Set's: recorded is the count recorded (0: none, and the counts
	// found do not fit Set's).
	Mismatch func(recorded int64) error
	// MaybeApplied is the error of a change of n units of key ("taking" or
	// "putting back": op) that may or may not have been made.
	MaybeApplied func(op, key string, n int64, cause error) error
}

// CountKey names segment i's count.
func (s *Segments) CountKey(i int) string {
	return keyspace.Aux(keyspace.Keys(s.Prefix, s.Set.Stripe(i)), keyspace.CountSuffix)
}

// segsKey names segment i's recorded segment count.
func (s *Segments) segsKey(i int) string {
	return keyspace.Aux(keyspace.Keys(s.Prefix, s.Set.Stripe(i)), keyspace.SegmentsSuffix)
}

// SetAll writes every segment's share of total (the first total mod n
// get one more) while token holds the segment's lock, after recording the
// segment count if the counter has none. held is the error of the lock
// behind token (see replyErr).
func (s *Segments) SetAll(ctx context.Context, token string, held func() error, total int64) error {
	res, err := s.setSegments(ctx, token, total)
	if err == nil && slicesHaveCode(res, codeUnrecorded) {
		if err = s.record(ctx); err == nil {
			res, err = s.setSegments(ctx, token, total)
		}
	}
	if err != nil {
		return err
	}
	for i, r := range res {
		if len(r) == 2 && r[0] == codeOK {
			continue
		}
		return s.replyErr(held, i, r)
	}
	return nil
}

// setSegments runs counter_set.lua for every segment in one pipeline and
// returns the replies.
func (s *Segments) setSegments(ctx context.Context, token string, total int64) ([][]int64, error) {
	n := int64(s.Set.Len())
	segs := strconv.Itoa(s.Set.Len())
	calls := make([]protocol.Call, n)
	for i := range n {
		v := total / n
		if i < total%n {
			v++
		}
		calls[i] = protocol.Call{Script: scripts.CounterSet,
			Keys: []string{s.Set.Stripe(int(i)), s.CountKey(int(i)), s.segsKey(int(i))},
			Args: []any{token, v, segs}}
	}
	res := make([][]int64, n)
	for i, cmd := range s.Exec.Batch(ctx, calls) {
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
// not enough, for segment seg under a lock whose error is held().
func (s *Segments) replyErr(held func() error, seg int, r []int64) error {
	switch {
	case len(r) != 2:
	case r[0] == codeNotHolder:
		if lerr := held(); lerr != nil {
			return lerr
		}
		return errs.Lost(s.Set.Stripe(seg), errs.ErrTaken)
	case r[0] == codeWrongType:
		return errs.ErrWrongType
	case r[0] == codeMismatch:
		return s.Mismatch(r[1])
	}
	return errors.New("dlock: unexpected reply from the counter script")
}

// Total returns the sum of the segments, after checking the segment
// counts read (see checkRead).
func (s *Segments) Total(ctx context.Context) (int64, error) {
	n := s.Set.Len()
	counts := make([]*redis.StringCmd, n+1) // and the count one past the last segment
	recs := make([]*redis.StringCmd, n)
	_, err := s.Exec.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range recs {
			counts[i] = p.Get(ctx, s.CountKey(i))
			recs[i] = p.Get(ctx, s.segsKey(i))
		}
		counts[n] = p.Get(ctx, s.CountKey(n))
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

// PutBack puts n units back into segment seg while token (held: the
// error of its lock) still holds it, and returns nil if they went back.
func (s *Segments) PutBack(ctx context.Context, token string, held func() error, seg int, n int64) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ReleaseTimeout)
	defer cancel()
	res, err := s.addOnce(rctx, token, seg, n)
	switch {
	case err == nil && len(res) == 2 && res[0] == codeOK:
		return nil
	case err == nil:
		err = s.replyErr(held, seg, res)
	case engine.Ambiguous(err), rexec.MayFollowRun(err):
		return s.MaybeApplied("putting back", s.CountKey(seg), n, err)
	default:
		err = errs.Unavailable(err)
	}
	return fmt.Errorf("dlock: putting %d units back into %q failed (they stay taken): %w", n, s.CountKey(seg), err)
}

// Add adds d to segment seg if token (held: the error of its lock) still
// holds it and the count stays non-negative, recording the segment count
// first if the counter has none. It reports whether it did.
func (s *Segments) Add(ctx context.Context, token string, held func() error, seg int, d int64) (bool, error) {
	res, err := s.addOnce(ctx, token, seg, d)
	if err == nil && len(res) == 2 && res[0] == codeUnrecorded {
		if rerr := s.record(ctx); rerr != nil {
			return false, rerr // nothing was taken
		}
		res, err = s.addOnce(ctx, token, seg, d)
	}
	switch {
	case engine.Ambiguous(err), rexec.MayFollowRun(err):
		// The script may have run: the units may have been taken (also
		// when the last try was refused: go-redis may have sent it before
		// by itself, see rexec.MayFollowRun).
		return false, s.MaybeApplied("taking", s.CountKey(seg), -d, err)
	case err != nil:
		return false, errs.Unavailable(err)
	case len(res) == 2 && (res[0] == codeOK || res[0] == 0):
		return res[0] == codeOK, nil
	}
	return false, s.replyErr(held, seg, res)
}

// addOnce runs counter_add.lua once for segment seg under a fresh
// operation id, so a second run of the same call (re-sent by the Redis
// client after a lost reply) does not add again. The call sends no copy
// after the Client's TTL, and the script keeps the operation's marker
// 10 s past that (and past the lock's expiry), so every copy finds it.
func (s *Segments) addOnce(ctx context.Context, token string, seg int, d int64) ([]int64, error) {
	key := s.Set.Stripe(seg)
	op := keyspace.Keys(s.Prefix, key).Queue + ":" + engine.NewToken()
	window := s.TTL
	ctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	return s.Exec.Run(ctx, protocol.Call{Script: scripts.CounterAdd,
		Keys: []string{key, s.CountKey(seg), op, s.segsKey(seg)},
		Args: []any{token, d, strconv.Itoa(s.Set.Len()), window.Milliseconds()}}).Int64Slice()
}
