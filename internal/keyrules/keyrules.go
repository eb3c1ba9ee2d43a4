// Package keyrules hands the key rules of package dlock (what a key may
// be, how its auxiliary keys are named) to dlock's other packages, so
// that each rule has one implementation, in package dlock, without being
// public API there. Package dlock sets every variable in its init, so
// they are set in any program that imports it, as every user of this
// package does.
package keyrules

import "strings"

// MaxKeyLength is the longest lock key package dlock accepts, in bytes.
const MaxKeyLength = 64 << 10

var (
	// ValidKey checks key as package dlock checks a lock key under the
	// default prefix: not empty, not too long, and not one of the
	// auxiliary names dlock derives from another key. Its errors are
	// dlock's (ErrEmptyKey, ErrKeyTooLong, ErrReservedKey).
	ValidKey func(key string) error

	// GuardKey names the guard record of the fenced resource key:
	// "dlock:{key}:guard" for a key without braces, in key's Cluster slot.
	GuardKey func(key string) string

	// Unavailable wraps an error of the Redis driver as dlock's
	// ErrUnavailable (nil stays nil).
	Unavailable func(err error) error

	// ValidLockKey checks key as package dlock checks a lock key under
	// prefix (for package admin).
	ValidLockKey func(prefix, key string) error

	// ValidPrefix checks an Options.Prefix as dlock.New does: its error
	// is dlock's ErrInvalidOpts ("" is the default, and valid).
	ValidPrefix func(prefix string) error
)

// ValidStripes checks the name and count of a set of n stripes as package
// dlock does: ErrInvalidCount for n < 1, ErrEmptyKey or ErrKeyTooLong for
// the name with the stripe suffix. Set by package dlock.
var ValidStripes func(name string, n int) error

// HashTag returns the part of key Redis Cluster hashes: the text between
// the first '{' and the first '}' after it, if non-empty; else "".
func HashTag(key string) string {
	s := strings.IndexByte(key, '{')
	if s < 0 {
		return ""
	}
	e := strings.IndexByte(key[s+1:], '}')
	if e <= 0 {
		return ""
	}
	return key[s+1 : s+1+e]
}
