// Package keyrules hands the key rules of package dlock (what a key may
// be, how its auxiliary keys are named) to dlock's other packages, so
// that each rule has one implementation, in package dlock, without being
// public API there. Package dlock sets every variable in its init, so
// they are set in any program that imports it, as every user of this
// package does.
package keyrules

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
)

