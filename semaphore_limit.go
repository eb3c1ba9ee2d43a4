package dlock

import (
	"context"
	"errors"
	"fmt"
	"github.com/dlock-go/dlock/internal/errs"
	"strings"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// SetLimit changes the limit of the semaphore for every client, now: the
// permits a raise frees go to the queued waiters at once (as many as fit);
// after a cut, holders keep their permits and newcomers wait until enough
// are given back. The limit is stored without a TTL. Limit 0 removes it:
// each client's own limit applies again.
//
// Each SetLimit applies only over the limit it read (it checks a version
// stored beside the limit): a SetLimit that failed with an ambiguous error
// and reaches Redis later, after another SetLimit applied, changes
// nothing, and a second copy of it that the Redis client sends again
// writes nothing either. Calling SetLimit again with the same limit after
// such an error leaves that limit in place. Of concurrent calls, the last
// to apply wins.
//
// On success, it returns nil. On failure, it returns an error:
// ErrInvalidLimit for a negative limit (or one above 2^50) and
// ErrWrongType if the key is not a semaphore's (changing nothing),
// ErrUnavailable wrapping a Redis error, ErrNoPermission (ACL), or another
// ErrInvalidArgument (a nil context, a bad key). On a nil *Semaphore it
// returns ErrNilClient.
func (s *Semaphore) SetLimit(ctx context.Context, limit int) error {
	if s == nil || s.c == nil {
		return ErrNilClient
	}
	c, key := s.c, s.key
	if ctx == nil {
		return ErrNilContext
	}
	if err := validKey(c.opts.Prefix, key); err != nil {
		return err
	}
	if limit < 0 || limit > maxSemaphoreLimit {
		return fmt.Errorf("%w: Semaphore limit %d (at most %d)", ErrInvalidLimit, limit, maxSemaphoreLimit)
	}
	k := c.keysFor(key)
	for {
		n, err := s.setLimitOnce(ctx, k, limit)
		switch {
		case err != nil:
			return err
		case n == codeWrongType:
			return ErrWrongType
		case n != codeLimitMoved:
			return nil
		}
		// Another SetLimit (or an earlier run of this one) applied since
		// the version was read: read it again.
	}
}

// Reply of semaphore_limit.lua: the limit's version is no longer the one
// read (nothing was written).
const codeLimitMoved = -3

// setLimitOnce reads the limit's version and runs semaphore_limit.lua over
// it once; it returns the script's reply.
func (s *Semaphore) setLimitOnce(ctx context.Context, k protocol.Keys, limit int) (int64, error) {
	c, ver := s.c, auxOf(k, limitVSuffix)
	v, err := c.rdb.Get(ctx, ver).Result()
	switch {
	case errors.Is(err, redis.Nil):
		v = "0"
	case wrongType(err):
		v = "" // the script reports the version key's type
	case err != nil:
		return 0, errs.Unavailable(err)
	}
	n, err := c.exec.Run(ctx, protocol.Call{Script: scripts.SemaphoreLimit,
		Keys: []string{k.Lock, auxOf(k, permitsSuffix), auxOf(k, limitSuffix), k.Queue, ver, k.Waiters, k.Tombs},
		Args: []any{limit, c.opts.PickupTimeout.Milliseconds(), v}}).Int64()
	if err != nil {
		return 0, errs.Unavailable(err)
	}
	return n, nil
}

// wrongType reports whether err is Redis's WRONGTYPE error reply.
func wrongType(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}
