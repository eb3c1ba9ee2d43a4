package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/redis/go-redis/v9"
)

// libMsg is the library's error message without its "dlock: " prefix, for
// messages that app.errorf prefixes already.
func libMsg(err error) string {
	return strings.TrimPrefix(err.Error(), "dlock: ")
}

// permMsg explains an ErrNoPermission on one line: what the Redis user's
// ACL refused, and the rights dlock needs (docs/guarantees.md).
func permMsg(err error) string {
	var pe *dlock.PermissionError
	if !errors.As(err, &pe) {
		return oneLine(libMsg(err))
	}
	return fmt.Sprintf("its ACL refuses a %s dlock needs (grant ~<keys> ~<prefix>:* &<prefix>:* +@all -@dangerous; the prefix is dlock unless --prefix): %s", pe.What, oneLine(pe.Err.Error()))
}

// evictionMsg is the line for an ErrEvictionPolicy: the servers that may
// evict keys, and the ways out.
func evictionMsg(err error) string {
	return fmt.Sprintf("Redis may evict lock keys (%s): set maxmemory-policy noeviction, or pass --allow-eviction to lock anyway", evictingServers(err))
}

// evictingServers names the servers of an ErrEvictionPolicy and their
// policies.
func evictingServers(err error) string {
	var ee *dlock.EvictionError
	if errors.As(err, &ee) {
		return printable(strings.Join(ee.Servers, ", "))
	}
	return "a master"
}

// evicting returns the ErrEvictionPolicy of rdb's masters, or nil (also
// when the check itself fails: the locks' own calls then report that).
func evicting(ctx context.Context, rdb redis.UniversalClient) error {
	c, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		return nil
	}
	defer c.Close()
	if err := c.CheckServers(ctx); errors.Is(err, dlock.ErrEvictionPolicy) {
		return err
	}
	return nil
}

// printable returns s as it is if every rune of it is printable (spaces
// included), else s quoted as a Go string: no escape sequence, newline or
// invalid UTF-8 from a key or a value reaches the terminal raw, so none can
// forge a row or recolour the screen.
func printable(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	if strings.HasPrefix(s, `"`) { // a value that looks quoted: quote it, so it is told apart
		return strconv.Quote(s)
	}
	return s
}

// shortToken is how status and list show a token by default: enough to
// tell holders apart, not enough to release anyone's lock with it.
func shortToken(t string) string {
	if utf8.RuneCountInString(t) <= 8 {
		return t
	}
	return string([]rune(t)[:6]) + "…"
}

// notALock explains an ErrWrongType on key: what the key is, by the kind
// Inspect sees, and the flag that takes it.
func notALock(ctx context.Context, adm *admin.Client, key string, semaphoreWanted bool) string {
	info, err := adm.Inspect(ctx, key)
	switch {
	case errors.Is(err, dlock.ErrReservedKey):
		lock, kind, _ := adm.AuxKeyOf(key)
		return fmt.Sprintf("%s is the %s key of lock %s, not a lock", printable(key), kind, printable(lock))
	case err != nil:
		return fmt.Sprintf("%s is not a lock", printable(key))
	case info.Kind == admin.KindSemaphore && !semaphoreWanted:
		limit := "N"
		if info.Limit > 0 {
			limit = strconv.FormatInt(info.Limit, 10)
		}
		return fmt.Sprintf("%s is a semaphore (%d permits held by %d holders), not a plain lock: take it with --limit %s",
			printable(key), info.Permits, info.Holders, limit)
	case semaphoreWanted && info.Held && info.Kind != admin.KindSemaphore && info.Kind != admin.KindWrongType:
		return fmt.Sprintf("%s is a %s lock, not a semaphore: take it without --limit", printable(key), info.Kind)
	}
	return fmt.Sprintf("%s is not a lock (it holds a non-string value)", printable(key))
}
