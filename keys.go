// keys.go: the names of a lock's Redis keys (named by internal/keyspace),
// the checks of a lock key, and tokens.

package dlock

import (
	"github.com/dlock-go/dlock/internal/defaults"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/protocol"
)

// The auxiliary suffixes this package's primitives use (see
// internal/keyspace for all of them).
const (
	readersSuffix = keyspace.ReadersSuffix
	holdsSuffix   = keyspace.HoldsSuffix
	permitsSuffix = keyspace.PermitsSuffix
	limitSuffix   = keyspace.LimitSuffix
	limitVSuffix  = keyspace.LimitVerSuffix
	countSuffix   = keyspace.CountSuffix
	segsSuffix    = keyspace.SegmentsSuffix
	leaderSuffix  = keyspace.LeaderSuffix
	electedSuffix = keyspace.ElectedSuffix
)

// keysFor names every Redis key and channel a lock on key uses under the
// Client's prefix.
func (c *Client) keysFor(key string) protocol.Keys { return keyspace.Keys(c.opts.Prefix, key) }

// auxOf names another auxiliary key of the lock k (see keyspace.Aux).
func auxOf(k protocol.Keys, suffix string) string { return keyspace.Aux(k, suffix) }

// The key rules package fenced shares (see internal/keyrules).
func init() {
	keyrules.ValidKey = func(key string) error { return validKey(defaults.Prefix, key) }
	keyrules.GuardKey = keyspace.GuardKey
	keyrules.Unavailable = errs.Unavailable
	keyrules.ValidLockKey = validKey
	keyrules.ValidPrefix = validPrefix
}

// validKey checks a lock (or fenced resource) key: not empty, at most
// keyrules.MaxKeyLength bytes, and, unless prefix is "", not one of the auxiliary
// names dlock derives from another lock key under prefix (ErrReservedKey):
// a lock there would corrupt that lock's state. It makes no Redis call.
func validKey(prefix, key string) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case len(key) > keyrules.MaxKeyLength:
		return keyTooLong(len(key))
	}
	if prefix == "" {
		return nil
	}
	if lock, kind, ok := keyspace.Owner(prefix, key); ok {
		return &reservedKeyError{key: key, lock: lock, kind: string(kind)}
	}
	return nil
}
