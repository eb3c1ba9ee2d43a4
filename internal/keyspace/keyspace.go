// Package keyspace owns the names of the Redis keys and channels dlock
// derives from a lock key: the auxiliary suffixes and their kinds, the
// hash-tagged form that keeps them in the lock key's Cluster slot, and
// decoding a name back to its lock key. Package dlock names its locks'
// keys with it, and package admin recognises and lists them; it makes no
// Redis call and imports no layer.
package keyspace

import (
	"strconv"
	"strings"
	"sync"

	"github.com/dlock-go/dlock/internal/defaults"
	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/dlock-go/dlock/protocol"
)

// The auxiliary names of a lock on key K under prefix P are
// "<P>:<tagged K><suffix>" (see Base for the tagged form). Table lists
// every suffix dlock uses; scripts get these names as KEYS, and build no
// name of their own.
const (
	FenceSuffix    = ":fence"    // string: last fencing token handed out
	QueueSuffix    = ":q"        // list: queued waiters' tokens, oldest first
	WaitersSuffix  = ":waiters"  // hash: queued waiters' leases (token -> "<end ms>|<payload>")
	TombsSuffix    = ":tombs"    // sorted set: tokens that left for good or released, scored with their end (ms)
	WakeSuffix     = ":wake"     // pub/sub channel: "released" for Barging waiters
	ReadersSuffix  = ":readers"  // sorted set: the readers of a read phase
	HoldsSuffix    = ":holds"    // sorted set: a reentrant owner's handles
	PermitsSuffix  = ":permits"  // hash: a semaphore's holders -> permits, "#used"
	LimitSuffix    = ":limit"    // string: a semaphore's SetLimit limit (no TTL)
	LimitVerSuffix = ":limitver" // string: the version of that limit, bumped by each SetLimit (no TTL)
	CountSuffix    = ":count"    // string: a Counter segment's count (no TTL)
	SegmentsSuffix = ":segments" // string: a Counter's segment count, beside each segment (no TTL)
	GuardSuffix    = ":guard"    // hash: a fenced resource's guard record (always the default prefix)
	LeaderSuffix   = ":leader"   // list: an election's leader records, newest first
	ElectedSuffix  = ":elected"  // pub/sub channel: an election's leader changed
)

// What a lock key holds besides a token (22 base64url characters) or a
// legacy timestamp (digits).
const (
	// SharedValue is what a read-locked key holds (dlock.RWLock's readers);
	// it cannot be a reentrant owner.
	SharedValue = "dlock:shared"
	// ReentrantPrefix starts what the key of a reentrant hold holds: the
	// prefix, then the owner id. No other kind of lock stores a value with
	// it (tokens have no ':', legacy values are digits, a read phase holds
	// SharedValue), so a reentrant owner never mistakes another lock for
	// its own hold.
	ReentrantPrefix = "dlock:reentrant:"
)

// AuxKind names one kind of auxiliary key or channel dlock derives from a
// lock key (docs/keys.md lists them).
type AuxKind string

// The kinds of auxiliary names, one per suffix, plus AuxOp.
const (
	AuxFence    AuxKind = "fence"    // <P>:{K}:fence
	AuxQueue    AuxKind = "queue"    // <P>:{K}:q
	AuxWaiters  AuxKind = "waiters"  // <P>:{K}:waiters, the queued waiters' leases
	AuxTombs    AuxKind = "tombs"    // <P>:{K}:tombs, the tombstones of tokens that left or released
	AuxOp       AuxKind = "op"       // <P>:{K}:q:<id>, the record of one Counter operation or legacy release
	AuxWake     AuxKind = "wake"     // <P>:{K}:wake (a pub/sub channel)
	AuxReaders  AuxKind = "readers"  // <P>:{K}:readers
	AuxHolds    AuxKind = "holds"    // <P>:{K}:holds
	AuxPermits  AuxKind = "permits"  // <P>:{K}:permits
	AuxLimit    AuxKind = "limit"    // <P>:{K}:limit
	AuxLimitVer AuxKind = "limitver" // <P>:{K}:limitver, the version of a semaphore's limit
	AuxCount    AuxKind = "count"    // <P>:{K}:count
	AuxSegments AuxKind = "segments" // <P>:{K}:segments, a Counter's segment count
	AuxGuard    AuxKind = "guard"    // dlock:{K}:guard (package fenced, the default prefix)
	AuxLeader   AuxKind = "leader"   // <P>:{K}:leader, an election's leader history
	AuxElected  AuxKind = "elected"  // <P>:{K}:elected (a pub/sub channel)
)

// Table is the one list of fixed auxiliary suffixes. No suffix is a
// suffix of another, and each is shorter than a token and starts with
// ':' (which tokens never contain), so a name ends in at most one of them
// and an operation record (queue + ":" + id) ends in none: decode is
// unambiguous (see Base for the proof that names never collide).
var Table = [...]struct {
	Kind   AuxKind
	Suffix string
}{
	{AuxFence, FenceSuffix}, {AuxQueue, QueueSuffix}, {AuxWaiters, WaitersSuffix}, {AuxTombs, TombsSuffix}, {AuxWake, WakeSuffix},
	{AuxReaders, ReadersSuffix}, {AuxHolds, HoldsSuffix}, {AuxPermits, PermitsSuffix},
	{AuxLimit, LimitSuffix}, {AuxLimitVer, LimitVerSuffix}, {AuxCount, CountSuffix}, {AuxSegments, SegmentsSuffix}, {AuxGuard, GuardSuffix},
	{AuxLeader, LeaderSuffix}, {AuxElected, ElectedSuffix},
}

// decode decodes a Redis key (or channel) name that dlock derives from a
// lock key under prefix: it returns that lock key and the name's kind, and
// ok false if name is not exactly such a name (it must be what Base
// makes for the key it decodes to, so names dlock never makes are not
// claimed).
func decode(prefix, name string) (key string, kind AuxKind, ok bool) {
	if !strings.HasPrefix(name, prefix+":") {
		return "", "", false
	}
	for _, a := range Table {
		if k, ok := KeyOfAux(prefix, a.Suffix, name); ok && Base(prefix, k)+a.Suffix == name {
			return k, a.Kind, true
		}
	}
	// An operation record: "<queue>:<id>".
	if i := strings.LastIndexByte(name, ':'); i > 0 && IsToken(name[i+1:]) {
		q := name[:i]
		if k, ok := KeyOfAux(prefix, QueueSuffix, q); ok && Base(prefix, k)+QueueSuffix == q {
			return k, AuxOp, true
		}
	}
	return "", "", false
}

// Owner is decode under prefix, plus the guard records, which are
// always under the default prefix.
func Owner(prefix, name string) (key string, kind AuxKind, ok bool) {
	if key, kind, ok = decode(prefix, name); ok || prefix == defaults.Prefix {
		return key, kind, ok
	}
	if k, ok := KeyOfAux(defaults.Prefix, GuardSuffix, name); ok && GuardKey(k) == name {
		return k, AuxGuard, true
	}
	return "", "", false
}

// GuardKey names the guard record package fenced keeps for the resource
// key: like an auxiliary key of a lock on key under the default prefix, so it
// is in key's Cluster slot and reserved (no lock may be taken on it).
func GuardKey(key string) string { return Base(defaults.Prefix, key) + GuardSuffix }

// TokenLen is the length of dlock's tokens (16 random bytes, base64url).
const TokenLen = 22

// IsToken reports whether s has the shape of dlock's tokens: TokenLen
// base64url characters.
func IsToken(s string) bool {
	if len(s) != TokenLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// GlobEscape escapes s for a Redis glob pattern (SCAN MATCH, KEYS,
// PSUBSCRIBE), so it matches itself only.
func GlobEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Base returns "<prefix>:<tagged key>", where the tagged key hashes to the
// same Cluster slot as key and can be decoded back to key (see KeyOfAux):
//   - key has a non-empty hash tag ("user:{42}:lock"): '#' then the key as
//     it is ("#user:{42}:lock");
//   - key has no '}' at all: the key wrapped in braces ("{orders:1}");
//   - otherwise (e.g. "a}b{" or "{}x"): wrapping would not give the key's own
//     slot, so a short tag known to hash to that slot is put in front:
//     "{<tag>}=<key>".
//
// No two (prefix, key, suffix) triples give one name, for prefixes
// package dlock accepts (no '{', '}' or '#') and non-empty keys:
//   - the prefix is determined by the name. Say P1 + ":" + T1 + S1 =
//     P2 + ":" + T2 + S2 with len(P1) < len(P2). The byte at index
//     len(P1)+1 is T1[0], '#' or '{'; in the second form that index is
//     inside P2 (which has neither) or is P2's ':' separator: impossible.
//   - the suffix is determined by the name: the fixed suffixes of
//     Table all start with ':', none is a suffix of another, and an
//     operation record ends in ":q:" + an id (TokenLen base64url bytes, no
//     ':'), longer than every fixed suffix, so no two of them end one name.
//   - the key is determined by the rest: KeyOfAux inverts Base (the
//     first byte picks the form; in the braced forms the first '}' ends
//     the key (form 2, followed by the suffix's ':') or the tag (form 3,
//     followed by '=')).
//
// So decode is a left inverse of the encoding, which is therefore
// injective; TestAuxNamesInjective and FuzzAuxNames check it.
func Base(prefix, key string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(key) + maxAuxExtra)
	writeBase(&b, prefix, key)
	return b.String()
}

// maxAuxExtra bounds what Base adds to the prefix and the key: ':',
// the tag's brackets and '=', and a slot tag (at most 4 base-36 digits).
const maxAuxExtra = 8

// writeBase writes Base(prefix, key) to b.
func writeBase(b *strings.Builder, prefix, key string) {
	b.WriteString(prefix)
	b.WriteByte(':')
	switch {
	case hashTag(key) != "":
		b.WriteByte('#')
		b.WriteString(key)
	case !strings.Contains(key, "}"):
		b.WriteByte('{')
		b.WriteString(key)
		b.WriteByte('}')
	default:
		b.WriteByte('{')
		b.WriteString(slotTag(Slot(key)))
		b.WriteString("}=")
		b.WriteString(key)
	}
}

// KeyOfAux decodes an auxiliary name "<prefix>:<tagged key><suffix>" back to
// the lock key; ok is false if name is not of that form.
func KeyOfAux(prefix, suffix, name string) (key string, ok bool) {
	t, ok := strings.CutPrefix(name, prefix+":")
	if !ok {
		return "", false
	}
	if t, ok = strings.CutSuffix(t, suffix); !ok || t == "" {
		return "", false
	}
	switch t[0] {
	case '#':
		return t[1:], hashTag(t[1:]) != ""
	case '{':
		e := strings.IndexByte(t, '}')
		switch {
		case e == len(t)-1 && e > 1:
			return t[1:e], true
		case e > 0 && e+1 < len(t) && t[e+1] == '=':
			return t[e+2:], true
		}
	}
	return "", false
}

// Keys names every Redis key and channel a lock on key under prefix
// uses (docs/keys.md lists them). The lock key is the caller's key,
// untouched, so other SET NX PX clients interoperate on it; the auxiliary
// names carry a hash tag that puts them in the lock key's Cluster slot,
// so one script may touch them all.
func Keys(prefix, key string) protocol.Keys {
	// The five names, one after the other in one string (one allocation,
	// not one per name), each a substring of it. base stays valid as the
	// Builder grows: it never changes bytes it has written.
	var b strings.Builder
	b.Grow(5*(len(prefix)+len(key)+maxAuxExtra) + len(FenceSuffix) + len(WakeSuffix) + len(QueueSuffix) +
		len(WaitersSuffix) + len(TombsSuffix))
	writeBase(&b, prefix, key)
	base := b.String()
	var ends [5]int
	for i, suffix := range [...]string{FenceSuffix, WakeSuffix, QueueSuffix, WaitersSuffix, TombsSuffix} {
		if i > 0 {
			b.WriteString(base)
		}
		b.WriteString(suffix)
		ends[i] = b.Len()
	}
	all := b.String()
	return protocol.Keys{Lock: key, Fence: all[:ends[0]], Wake: all[ends[0]:ends[1]], Queue: all[ends[1]:ends[2]],
		Waiters: all[ends[2]:ends[3]], Tombs: all[ends[3]:]}
}

// Aux names another auxiliary key of the lock k: "<prefix>:<tagged
// key><suffix>", in the lock key's slot like k.Fence.
func Aux(k protocol.Keys, suffix string) string {
	return strings.TrimSuffix(k.Fence, FenceSuffix) + suffix
}

// hashTag returns the part of key Redis Cluster hashes: the text between the
// first '{' and the first '}' after it, if non-empty; else "".
func hashTag(key string) string { return keyrules.HashTag(key) }

// Slot returns the Redis Cluster hash slot (0..16383) of key, honouring hash
// tags as Redis does.
func Slot(key string) int {
	if t := hashTag(key); t != "" {
		key = t
	}
	return int(crc16(key) & 16383)
}

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster uses for slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

var (
	slotTagsOnce sync.Once
	slotTags     [16384]string // slotTags[s] hashes to slot s; no braces
)

// slotTag returns a short string that hashes to slot. The table is built
// once, on first use, by counting in base 36 until every slot has a name.
func slotTag(slot int) string {
	slotTagsOnce.Do(func() {
		left := len(slotTags)
		for n := 0; left > 0; n++ {
			s := strconv.FormatInt(int64(n), 36)
			if i := crc16(s) & 16383; slotTags[i] == "" {
				slotTags[i] = s
				left--
			}
		}
	})
	return slotTags[slot]
}
