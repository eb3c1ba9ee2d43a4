package dlock

import (
	"context"
	"errors"
	"math/rand/v2"

	"github.com/dlock-go/dlock/internal/oneline"
)

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
// The units go back only if fn itself fails, and only while Take still
// holds the segment's lock (so they never land on a count that a Set or
// another taker wrote after the lock was lost): Take then returns -1 and
// fn's error (joined with an error if putting them back failed, when they
// stay taken; one matching ErrMaybeApplied if it is unknown whether they
// went back). Once fn succeeded the sale stands: an error releasing the
// segment's lock afterwards (it was lost, or Redis failed at the release)
// is returned with the segment, and the units stay taken. If the reply to
// the take itself is lost (Take sends no copy of it after the Client's
// TTL), the units may or may not have been taken: Take returns the
// segment and an error matching ErrMaybeApplied, without running fn. So
// the segment is returned (>= 0) exactly when units were, or may have
// been, taken from it and not put back. A take or put-back that the Redis
// client sends again changes the count once.
func (s *Counter) Take(ctx context.Context, n int64, fn func(ctx context.Context, segment int) error) (int, error) {
	if err := s.check(); err != nil {
		return -1, err
	}
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
	took, err := s.rs.Add(ctx, lk.Token(), lk.Err, seg, -n)
	if err != nil || !took {
		var ma *maybeAppliedError
		return errors.As(err, &ma), oneline.Join(err, unlock())
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
	return false, oneline.Join(ferr, s.rs.PutBack(ctx, lk.Token(), lk.Err, seg, n), unlock())
}
