package dlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A fencing token only protects a resource that checks it. A lock holder
// can pause (GC, SIGSTOP, a slow disk) or have its write delayed in the
// network past the end of its lease; meanwhile the lock passes to a new
// holder with a larger fence. The resource must then refuse the late write:
// it remembers the largest fence it has accepted and rejects anything
// older. This file provides that check for a resource stored in Redis
// (FencedSet, FencedDelete), and documents it for SQL (see FencedSet).

var (
	//go:embed scripts/guard.lua
	guardSrc    string
	guardScript = redis.NewScript(guardSrc)
)

// GuardKey returns the name of the guard record FencedSet and FencedDelete
// keep for the resource key: a hash holding the last accepted fence and a
// SHA1 of its owner, in key's Cluster slot ("dlock:{key}:guard" for a key
// without braces; the same naming as the lock's auxiliary keys with the
// default prefix). It never expires. Deleting it resets the resource's
// protection: the next write with any fence is accepted.
func GuardKey(key string) string { return auxBase(DefaultPrefix, key) + guardSuffix }

// FencedSet sets the string key to value only if fence is newer than every
// fence the key has accepted, in one script call: the check a protected
// resource makes so that a holder that lost its lock cannot overwrite the
// work of a newer holder. Pass Lock.Fence() as fence and, as owner, an
// identity unique to the grant (Lock.Token() is one; only its SHA1 is
// stored). An equal fence is accepted from the owner that recorded it, so a
// grant may write several times and may retry a write whose reply was
// lost; from another owner it is refused (two grants with one fence means
// the fence counter went back: a Redis restart without persistence or a
// failover).
//
// It returns nil when the value was written, a *StaleFenceError (matching
// ErrStaleFence) when it was refused, ErrUnavailable wrapping a Redis
// error, ErrWrongType if the guard record is not a hash, and an
// ErrInvalidArgument for a nil context or client, a bad key, fence 0 or an
// empty owner. The last accepted fence is kept in GuardKey(key).
//
// The resource may live on a different Redis from the lock (it usually
// should: the guard must not forget fences when the lock's server does).
// The same rule in SQL, for a row that stores the fence of its last writer
// in a BIGINT column (fences fit: they start from the Redis clock in
// microseconds, about 2^51 today):
//
//	UPDATE accounts SET balance = $3, fence = $1 WHERE id = $2 AND fence < $1
//
// Zero rows updated means a newer holder has written (or the row does not
// exist): the caller is stale and must stop. For a grant that writes the
// same row several times, also store the owner and accept its own fence
// again:
//
//	UPDATE accounts SET balance = $3, fence = $1, owner = $4
//	 WHERE id = $2 AND (fence < $1 OR (fence = $1 AND owner = $4))
//
// Run the check and the write in one statement (or under SELECT ... FOR
// UPDATE in one transaction): a check made before a separate write is
// exactly the race fencing exists to close.
func FencedSet(ctx context.Context, rdb redis.Scripter, key string, fence uint64, owner, value string) error {
	return fenced(ctx, rdb, key, fence, owner, "set", value)
}

// FencedDelete deletes key under the same rule as FencedSet: only if fence
// is newer than every fence key has accepted (or equal, from the same
// owner). The guard record stays, so an older holder cannot recreate the
// key afterwards.
func FencedDelete(ctx context.Context, rdb redis.Scripter, key string, fence uint64, owner string) error {
	return fenced(ctx, rdb, key, fence, owner, "del", "")
}

// LastFence returns the last fence the resource key accepted through
// FencedSet or FencedDelete, 0 if none.
func LastFence(ctx context.Context, rdb redis.Cmdable, key string) (uint64, error) {
	if err := checkFencedArgs(ctx, rdb, key); err != nil {
		return 0, err
	}
	v, err := rdb.HGet(ctx, GuardKey(key), "fence").Result()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, nil
	case err != nil && isWrongType(err):
		return 0, ErrWrongType
	case err != nil:
		return 0, unavailable(err)
	}
	f, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("dlock: guard record of %q holds fence %q: %w", key, v, err)
	}
	return f, nil
}

func checkFencedArgs(ctx context.Context, rdb any, key string) error {
	if ctx == nil {
		return ErrNilContext
	}
	if isNil(rdb) {
		return ErrNilClient
	}
	return validKey(DefaultPrefix, key)
}

func isWrongType(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

func fenced(ctx context.Context, rdb redis.Scripter, key string, fence uint64, owner, op, value string) error {
	if err := checkFencedArgs(ctx, rdb, key); err != nil {
		return err
	}
	if fence == 0 {
		return errZeroFence
	}
	if owner == "" {
		return errEmptyOwner
	}
	c := Call{guardScript, []string{key, GuardKey(key)}, []any{strconv.FormatUint(fence, 10), owner, op, value}}
	return decodeGuard(key, fence, c.Run(ctx, rdb))
}

// decodeGuard decodes guard.lua's reply. Only the exact shapes the script
// returns are accepted; anything else is an error, never "written".
func decodeGuard(key string, fence uint64, cmd *redis.Cmd) error {
	res, err := cmd.Slice()
	if err != nil {
		return unavailable(err)
	}
	bad := fmt.Errorf("dlock: unexpected reply from the guard script: %v", res)
	if len(res) != 2 {
		return bad
	}
	code, ok1 := res[0].(int64)
	last, ok2 := res[1].(string)
	if !ok1 || !ok2 {
		return bad
	}
	switch code {
	case 1:
		return nil
	case codeWrongType:
		return ErrWrongType
	case 0:
		l, err := strconv.ParseUint(last, 10, 64)
		if err != nil {
			return bad
		}
		return &StaleFenceError{Key: key, Fence: fence, Last: l}
	}
	return bad
}
