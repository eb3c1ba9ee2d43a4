// Package fenced protects a resource stored in Redis with the fencing
// tokens of package dlock's locks.
//
// A fencing token only protects a resource that checks it. A lock holder
// can pause (GC, SIGSTOP, a slow disk) or have its write delayed in the
// network past the end of its lease; meanwhile the lock passes to a new
// holder with a larger fence. The resource must then refuse the late
// write: it remembers the largest fence it has accepted and rejects
// anything older. Set and Delete make that check and the write in one
// script call, keeping the last accepted fence in a guard record beside
// the resource (GuardKey); Last reads it. Set's documentation shows the
// same rule for a row in SQL.
package fenced

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed guard.lua
	guardSrc    string
	guardScript = redis.NewScript(guardSrc)
)

// The script's name for the command-level fault layer of the tests.
func init() { probe.NameScript("guard", guardScript.Hash()) }

// ErrStale: a fenced write was refused because the resource has already
// accepted a newer fence (or the same fence from another owner). The
// writer's lock is no longer valid: it must stop acting as the holder.
// Set and Delete return it as a *StaleError.
var ErrStale = errors.New("dlock: stale fence: the resource has accepted a newer one")

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

// Reply code of guard.lua: the guard record is not a hash.
const codeWrongType = -2

// GuardKey returns the name of the guard record Set and Delete keep for
// the resource key: a hash holding the last accepted fence and a SHA1 of
// its owner, in key's Cluster slot ("dlock:{key}:guard" for a key without
// braces; the same naming as a lock's auxiliary keys with dlock's default
// prefix, so no lock can be taken on it). It never expires. Deleting it
// resets the resource's protection: the next write with any fence is
// accepted.
func GuardKey(key string) string { return keyrules.GuardKey(key) }

// Set sets the string key to value only if fence is newer than every
// fence the key has accepted, in one script call: the check a protected
// resource makes so that a holder that lost its lock cannot overwrite the
// work of a newer holder. Pass Lock.Fence() as fence and, as owner, an
// identity unique to the grant (Lock.Token() is one; only its SHA1 is
// stored). An equal fence is accepted from the owner that recorded it, so
// a grant may write several times and may retry a write whose reply was
// lost; from another owner it is refused (two grants with one fence means
// the fence counter went back: a Redis restart without persistence or a
// failover).
//
// It returns nil when the value was written, a *StaleError (matching
// ErrStale) when it was refused, dlock.ErrUnavailable wrapping a Redis
// error, dlock.ErrWrongType if the guard record is not a hash, and a
// dlock.ErrInvalidArgument for a nil context or client, a bad key, fence
// 0 or an empty owner. The last accepted fence is kept in GuardKey(key).
//
// The resource may live on a different Redis from the lock (it usually
// should: the guard must not forget fences when the lock's server does).
// The same rule in SQL, for a row that stores the fence of its last
// writer in a BIGINT column (fences fit: they start from the Redis clock
// in microseconds, about 2^51 today):
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
func Set(ctx context.Context, rdb redis.Scripter, key string, fence uint64, owner, value string) error {
	return write(ctx, rdb, key, fence, owner, "set", value)
}

// Delete deletes key under the same rule as Set: only if fence is newer
// than every fence key has accepted (or equal, from the same owner). The
// guard record stays, so an older holder cannot recreate the key
// afterwards. Its errors are Set's.
func Delete(ctx context.Context, rdb redis.Scripter, key string, fence uint64, owner string) error {
	return write(ctx, rdb, key, fence, owner, "del", "")
}

// Last returns the last fence the resource key accepted through Set or
// Delete, 0 if none. Errors: dlock.ErrUnavailable wrapping a Redis error,
// dlock.ErrWrongType if the guard record is not a hash, and a
// dlock.ErrInvalidArgument for a nil context or client or a bad key.
func Last(ctx context.Context, rdb redis.Cmdable, key string) (uint64, error) {
	if err := checkArgs(ctx, rdb, key); err != nil {
		return 0, err
	}
	v, err := rdb.HGet(ctx, GuardKey(key), "fence").Result()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, nil
	case err != nil && isWrongType(err):
		return 0, dlock.ErrWrongType
	case err != nil:
		return 0, keyrules.Unavailable(err)
	}
	f, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("dlock: guard record of %q holds fence %q: %w", key, v, err)
	}
	return f, nil
}

func checkArgs(ctx context.Context, rdb any, key string) error {
	if ctx == nil {
		return dlock.ErrNilContext
	}
	if isNil(rdb) {
		return dlock.ErrNilClient
	}
	return keyrules.ValidKey(key)
}

// isNil reports whether v is nil or a nil pointer (a typed nil client).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

func isWrongType(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

func write(ctx context.Context, rdb redis.Scripter, key string, fence uint64, owner, op, value string) error {
	if err := checkArgs(ctx, rdb, key); err != nil {
		return err
	}
	if fence == 0 {
		return errZeroFence
	}
	if owner == "" {
		return errEmptyOwner
	}
	cmd := guardScript.Run(ctx, rdb, []string{key, GuardKey(key)}, strconv.FormatUint(fence, 10), owner, op, value)
	return decode(key, fence, cmd)
}

// decode decodes guard.lua's reply. Only the exact shapes the script
// returns are accepted; anything else is an error, never "written".
func decode(key string, fence uint64, cmd *redis.Cmd) error {
	res, err := cmd.Slice()
	if err != nil {
		return keyrules.Unavailable(err)
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
		return dlock.ErrWrongType
	case 0:
		l, err := strconv.ParseUint(last, 10, 64)
		if err != nil {
			return bad
		}
		return &StaleError{Key: key, Fence: fence, Last: l}
	}
	return bad
}
