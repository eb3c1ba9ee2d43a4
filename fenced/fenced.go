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
//
// The writes of one grant are ordered too: each carries a sequence, and a
// write that reaches Redis after a later write of the same grant (its
// reply was lost and it was delayed, not lost) is not applied
// (ErrSuperseded). The sequence orders the writes a process issues, in
// the order it issues them, and those of processes on one host (it is at
// least the wall clock).
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

// Reply codes of guard.lua: a later write of the same grant was applied
// first; the guard record is not a hash.
const (
	codeSuperseded = -1
	codeWrongType  = -2
)

// GuardKey returns the name of the guard record Set and Delete keep for
// the resource key: a hash holding the last accepted fence, a SHA1 of its
// owner and the sequence of the last write applied, in key's Cluster slot ("dlock:{key}:guard" for a key without
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
// Within one grant the last write issued wins: a write that reaches Redis
// after a later write of the same fence and owner was applied is not
// applied and returns an error matching ErrSuperseded. Writes are ordered
// by a sequence taken when Set is called: increasing within a process,
// and at least the wall clock in nanoseconds, so writes of one grant from
// several processes are ordered by their hosts' clocks. The same command
// sent again by the client (after a lost reply) carries the same sequence
// and is applied again, writing the same value.
//
// It returns nil when the value was written, a *StaleError (matching
// ErrStale) when it was refused, an error matching ErrSuperseded when a
// later write of the grant was applied first, dlock.ErrUnavailable
// wrapping a Redis error, dlock.ErrWrongType if the guard record is not a hash, and a
// dlock.ErrInvalidArgument for a nil context or client, a bad key, fence
// 0 or an empty owner. The last accepted fence is kept in GuardKey(key).
//
// The resource may live on a different Redis from the lock (it usually
// should: the guard must not forget fences when the lock's server does).
// The same rule in SQL, for a row that stores the fence of its last
// writer in a BIGINT column (fences fit: they start from the Redis clock
// in microseconds, which stays below 2^63 for another 290,000 years):
//
//	UPDATE accounts SET balance = $3, fence = $1 WHERE id = $2 AND fence < $1
//
// Zero rows updated means a newer holder has written (or the row does not
// exist): the caller is stale and must stop. For a grant that writes the
// same row several times, also store the owner and the write's sequence,
// and accept its own fence again for a write not older than the last:
//
//	UPDATE accounts SET balance = $3, fence = $1, owner = $4, seq = $5
//	 WHERE id = $2 AND (fence < $1 OR (fence = $1 AND owner = $4 AND seq <= $5))
//
// Run the check and the write in one statement (or under SELECT ... FOR
// UPDATE in one transaction): a check made before a separate write is
// exactly the race fencing exists to close.
func Set(ctx context.Context, rdb redis.Scripter, key string, fence uint64, owner, value string) error {
	return write(ctx, rdb, key, fence, owner, "set", value)
}

// Delete deletes key under the same rule as Set: only if fence is newer
// than every fence key has accepted (or equal, from the same owner, and
// not issued before the grant's last write applied). The
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
	return run(ctx, rdb, key, fence, owner, op, value, nextSeq())
}

// run runs guard.lua for one write with sequence seq.
func run(ctx context.Context, rdb redis.Scripter, key string, fence uint64, owner, op, value string, seq uint64) error {
	f, s := strconv.FormatUint(fence, 10), strconv.FormatUint(seq, 10)
	cmd := guardScript.Run(ctx, rdb, []string{key, GuardKey(key)}, f, owner, op, value, s)
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
	case codeSuperseded:
		return fmt.Errorf("%w: %q at fence %d", ErrSuperseded, key, fence)
	case 0:
		l, err := strconv.ParseUint(last, 10, 64)
		if err != nil {
			return bad
		}
		return &StaleError{Key: key, Fence: fence, Last: l}
	}
	return bad
}
