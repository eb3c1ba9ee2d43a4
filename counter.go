package dlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/dlock-go/dlock/internal/stripes"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Counter is a non-negative count (a stock) split over segments, each
// with its own lock, so that takers on different segments work in
// parallel instead of queueing on one lock: a segmented lock, 分段锁, as in a
// flash sale. Segment i's lock is stripe i of stripe.New(name, n)
// ("<name>:<i>") and its
// count lives beside it, in the lock key's slot
// ("<prefix>:{<name>:<i>}:count", no TTL). All users of a Counter must use
// the same name and segment count. It is safe for concurrent use.
//
// Every change is made by a script that checks the segment's lock token
// first, so a taker that lost its lock (paused past its TTL) changes
// nothing: the count never goes below zero and nothing is sold twice.
type Counter struct {
	c    *Client
	segs stripes.Set
}

// Counter returns the counter name split over segments segments. Errors
// as stripe.New's: ErrInvalidCount for segments < 1, ErrEmptyKey or
// ErrKeyTooLong for the name. It makes no Redis call.
func (c *Client) Counter(name string, segments int) (*Counter, error) {
	if err := validStripes(name, segments); err != nil {
		return nil, err
	}
	return &Counter{c: c, segs: stripes.Make(name, segments)}, nil
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

var (
	//go:embed scripts/counter_add.lua
	counterAddSrc    string
	counterAddScript = libScript(counterAddSrc)
)

// Reply of counter_add.lua when the caller does not hold the segment.
const codeNotHolder = -1

func (s *Counter) countKey(i int) string {
	return auxOf(s.c.keysFor(s.segs.Stripe(i)), countSuffix)
}

// Set sets the total to total, spread evenly over the segments (the first
// total mod n get one more). It holds every segment's lock meanwhile
// (LockMulti), so it never races a Take. total < 0 is ErrInvalidCount.
func (s *Counter) Set(ctx context.Context, total int64) error {
	if total < 0 {
		return ErrInvalidCount
	}
	n := int64(s.segs.Len())
	keys := make([]string, n)
	for i := range keys {
		keys[i] = s.segs.Stripe(i)
	}
	return s.c.DoMulti(ctx, keys, func(ctx context.Context) error {
		_, err := s.c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range n {
				v := total / n
				if i < total%n {
					v++
				}
				p.Set(ctx, s.countKey(int(i)), v, 0)
			}
			return nil
		})
		return unavailable(err)
	})
}

// Total returns the sum of the segments (not atomic across them: a
// snapshot while takers run is approximate).
func (s *Counter) Total(ctx context.Context) (int64, error) {
	if ctx == nil {
		return 0, ErrNilContext
	}
	cmds := make([]*redis.StringCmd, s.segs.Len())
	_, err := s.c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.Get(ctx, s.countKey(i))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, unavailable(err)
	}
	var sum int64
	for _, cmd := range cmds {
		if v, err := cmd.Int64(); err == nil {
			sum += v
		}
	}
	return sum, nil
}

// Take takes n from one segment that has at least n, and returns the
// segment. It starts at a random segment and tries the others in turn
// without waiting for a busy one (TryLock); only if every segment that
// may have stock is busy does it wait for them, one by one. If fn is not
// nil it runs under the segment's lock after the units are taken (create
// the order, say), with a context cancelled if the lock is lost. If no
// segment has n left, the error is ErrExhausted (the units may sit in a
// segment of fewer than n; Take never splits a request over segments).
// n < 1 is ErrInvalidCount.
//
// The units go back only if fn itself fails: Take then returns -1 and
// fn's error (joined with an error if putting them back failed; one
// matching ErrMaybeApplied if it is unknown whether they went back). Once
// fn succeeded the sale stands: an error releasing the segment's lock
// afterwards (it was lost, or Redis failed at the release) is returned
// with the segment, and the units stay taken. If the reply to the take
// itself is lost, the units may or may not have been taken: Take returns
// the segment and an error matching ErrMaybeApplied, without running fn.
// So the segment is returned (>= 0) exactly when units were, or may have
// been, taken from it and not put back.
func (s *Counter) Take(ctx context.Context, n int64, fn func(ctx context.Context, segment int) error) (int, error) {
	if ctx == nil {
		return -1, ErrNilContext
	}
	if n < 1 {
		return -1, ErrInvalidCount
	}
	segs := s.segs.Len()
	first := rand.IntN(segs)
	var busy []int
	for i := range segs {
		seg := (first + i) % segs
		lk, err := s.c.TryLock(ctx, s.segs.Stripe(seg))
		if errors.Is(err, ErrNotAcquired) {
			busy = append(busy, seg)
			continue
		}
		if err != nil {
			return -1, err
		}
		if ok, err := s.takeFrom(ctx, lk, seg, n, fn); ok || err != nil {
			return took(seg, ok), err
		}
	}
	for _, seg := range busy {
		lk, err := s.c.Lock(ctx, s.segs.Stripe(seg))
		if err != nil {
			return -1, err
		}
		if ok, err := s.takeFrom(ctx, lk, seg, n, fn); ok || err != nil {
			return took(seg, ok), err
		}
	}
	return -1, ErrExhausted
}

// took is seg if ok, else -1.
func took(seg int, ok bool) int {
	if ok {
		return seg
	}
	return -1
}

// takeFrom takes n from segment seg under lk, runs fn, and releases lk.
// It reports whether units were (or may have been) taken and stay taken.
func (s *Counter) takeFrom(ctx context.Context, lk *Lock, seg int, n int64, fn func(context.Context, int) error) (bool, error) {
	unlock := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.c.opts.ReleaseTimeout)
		defer cancel()
		return lk.Unlock(rctx)
	}
	took, err := s.add(ctx, lk, seg, -n)
	if err != nil || !took {
		var ma *maybeAppliedError
		return errors.As(err, &ma), errors.Join(err, unlock())
	}
	if fn == nil {
		return true, unlock()
	}
	// fn runs with a context cancelled if the lock is lost. Only its own
	// error puts the units back; the release's error does not (fn has
	// committed by then).
	fctx, stop := watchLoss(ctx, lk)
	ferr := fn(fctx, seg)
	stop()
	if ferr == nil {
		return true, unlock()
	}
	// Put the units back: adding never oversells, so it needs no lock.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), s.c.opts.ReleaseTimeout)
	res, perr := s.addOnce(rctx, lk, seg, n, "back")
	rcancel()
	if perr == nil && (len(res) != 2 || res[0] != codeOK) {
		perr = fmt.Errorf("the counter script answered %v", res)
	}
	switch {
	case perr == nil:
	case ambiguous(perr):
		ferr = errors.Join(ferr, &maybeAppliedError{op: "putting back", key: s.countKey(seg), n: n, cause: perr})
	default:
		ferr = errors.Join(ferr, fmt.Errorf("dlock: putting %d units back into %q failed (they stay taken): %w", n, s.countKey(seg), unavailable(perr)))
	}
	return false, errors.Join(ferr, unlock())
}

// addOnce runs counter_add.lua once for segment seg under a fresh
// operation id, so a second run of the same call (re-sent by the Redis
// client after a lost reply) does not add again.
func (s *Counter) addOnce(ctx context.Context, lk *Lock, seg int, d int64, mode string) ([]int64, error) {
	ks := s.c.keysFor(s.segs.Stripe(seg))
	op := ks.Queue + ":" + newToken()
	return runScript(ctx, s.c.rdb, protocol.Call{Script: counterAddScript, Keys: []string{lk.Key(), s.countKey(seg), op}, Args: []any{lk.Token(), d, mode}}).Int64Slice()
}

// add adds d to segment seg if lk (its lock) still holds it and the count
// stays non-negative. It reports whether it did.
func (s *Counter) add(ctx context.Context, lk *Lock, seg int, d int64) (bool, error) {
	res, err := s.addOnce(ctx, lk, seg, d, "")
	switch {
	case ambiguous(err):
		// The script may have run: the units may have been taken.
		return false, &maybeAppliedError{op: "taking", key: s.countKey(seg), n: -d, cause: err}
	case err != nil:
		return false, unavailable(err)
	case len(res) != 2:
		return false, errors.New("dlock: unexpected reply from the counter script")
	case res[0] == codeWrongType:
		return false, ErrWrongType
	case res[0] == codeNotHolder:
		if lerr := lk.Err(); lerr != nil {
			return false, lerr
		}
		return false, &lostError{key: lk.Key(), cause: ErrTaken}
	}
	return res[0] == codeOK, nil
}
