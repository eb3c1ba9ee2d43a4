// Package stripe maps any number of logical keys onto a fixed set of n
// lock keys (stripes), so a program can lock per item (per user, per SKU)
// without a Redis key per item, or split one hot item's lock into
// several.
//
// A Set is a pure mapping: lock its keys with any dlock call
// (Client.Lock, RWLock, Semaphore, LockMulti...).
package stripe

import (
	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/dlock-go/dlock/internal/stripes"
)

// Set is n stripes named after a name: stripe i is the lock key
// "<name>:<i>". It is safe for concurrent use.
//
// A logical key maps to stripe FNV-1a-64(h) mod n, where h is the key's
// hash tag if it has one (the text between the first '{' and the next
// '}'), else the whole key: keys that share a hash tag (meant to live
// together in a Cluster) share a stripe. Other programs can compute the
// same mapping. If the name has a hash tag, every stripe is in one
// Cluster slot (a LockMulti over stripes is one script); otherwise the
// stripes spread over slots.
//
// Two unrelated logical keys may share a stripe: they then exclude each
// other. More stripes, fewer such collisions; use dlock's LockMulti (with
// Keys) to hold several logical keys without deadlock.
//
// The zero Set has one stripe, named ":0".
type Set struct {
	s   stripes.Set
	err error // a bad argument of New
}

// New returns n stripes named after name. Like dlock's constructors it
// returns no error and makes no Redis call: if name or n is bad, the Set
// is invalid: Err returns why (dlock.ErrInvalidCount for n < 1, or
// dlock.ErrEmptyKey or dlock.ErrKeyTooLong for the name with the stripe
// suffix; each matches dlock.ErrInvalidArgument), Len is 1, and every key
// it returns is "", which every dlock call refuses (dlock.ErrEmptyKey), so
// an invalid Set never locks anything.
func New(name string, n int) Set {
	if err := keyrules.ValidStripes(name, n); err != nil {
		return Set{err: err}
	}
	return Set{s: stripes.Make(name, n)}
}

// Err returns nil for a valid Set, else the bad argument of New.
func (s Set) Err() error { return s.err }

// Len returns the number of stripes (1 for the zero Set and an invalid one).
func (s Set) Len() int { return s.s.Len() }

// Index returns the stripe of key, in [0, Len()).
func (s Set) Index(key string) int { return s.s.Index(key) }

// Stripe returns the lock key of stripe i ("<name>:<i>"; "" if the Set is
// invalid).
func (s Set) Stripe(i int) string {
	if s.err != nil {
		return ""
	}
	return s.s.Stripe(i)
}

// Key returns the lock key of the stripe key maps to ("" if the Set is
// invalid).
func (s Set) Key(key string) string { return s.Stripe(s.Index(key)) }

// Keys returns the distinct stripe keys of keys, sorted: pass them to
// dlock's LockMulti to hold all of the logical keys at once. For an
// invalid Set it returns [""] (none for no keys).
func (s Set) Keys(keys ...string) []string {
	if s.err != nil {
		if len(keys) == 0 {
			return []string{}
		}
		return []string{""}
	}
	return s.s.Keys(keys...)
}
