// Package stripes is the mapping of logical keys onto n lock keys that
// package stripe publishes and dlock's Counter uses for its segments.
package stripes

import (
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/dlock-go/dlock/internal/keyrules"
)

// Set is n stripes named after name. Its name and count are checked by
// the caller (keyrules.ValidStripes).
type Set struct {
	name string
	n    int
}

// Make returns the n stripes named after name.
func Make(name string, n int) Set { return Set{name: name, n: n} }

// Len is the number of stripes (1 for the zero Set).
func (s Set) Len() int { return max(s.n, 1) }

// Index is the stripe of key: FNV-1a-64 of its hash tag (or of the whole
// key, without one) mod Len.
func (s Set) Index(key string) int {
	h := fnv.New64a()
	if t := keyrules.HashTag(key); t != "" {
		key = t
	}
	_, _ = h.Write([]byte(key))
	return int(h.Sum64() % uint64(s.Len()))
}

// Stripe is the lock key of stripe i: "<name>:<i>".
func (s Set) Stripe(i int) string { return s.name + ":" + strconv.Itoa(i) }

// Key is the lock key of the stripe key maps to.
func (s Set) Key(key string) string { return s.Stripe(s.Index(key)) }

// Keys is the distinct stripe keys of keys, sorted.
func (s Set) Keys(keys ...string) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, s.Key(k))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
