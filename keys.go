package dlock

import (
	"crypto/rand"
	"encoding/base64"
	"github.com/dlock-go/dlock/internal/defaults"
	"strconv"
	"strings"
	"sync"

	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/dlock-go/dlock/protocol"
)

// The auxiliary names of a lock on key K under prefix P are
// "<P>:<tagged K><suffix>" (see auxBase for the tagged form). auxTable lists
// every suffix dlock uses; scripts get these names as KEYS, except a
// waiter's lease, which they build as the queue name + ":" + token.
const (
	fenceSuffix   = ":fence"    // string: last fencing token handed out
	queueSuffix   = ":q"        // list: queued waiters' tokens, oldest first
	wakeSuffix    = ":wake"     // pub/sub channel: "released" for Barging waiters
	readersSuffix = ":readers"  // sorted set: the readers of a read phase
	holdsSuffix   = ":holds"    // sorted set: a reentrant owner's handles
	permitsSuffix = ":permits"  // hash: a semaphore's holders -> permits, "#used"
	limitSuffix   = ":limit"    // string: a semaphore's SetLimit limit (no TTL)
	limitVSuffix  = ":limitver" // string: the version of that limit, bumped by each SetLimit (no TTL)
	countSuffix   = ":count"    // string: a Counter segment's count (no TTL)
	segsSuffix    = ":segments" // string: a Counter's segment count, beside each segment (no TTL)
	guardSuffix   = ":guard"    // hash: a fenced resource's guard record (always the default prefix)
	leaderSuffix  = ":leader"   // list: an election's leader records, newest first
	electedSuffix = ":elected"  // pub/sub channel: an election's leader changed
)

// AuxKind names one kind of auxiliary key or channel dlock derives from a
// lock key (docs/keys.md lists them).
type AuxKind string

// The kinds of auxiliary names, one per suffix, plus AuxWaiter.
const (
	AuxFence    AuxKind = "fence"    // <P>:{K}:fence
	AuxQueue    AuxKind = "queue"    // <P>:{K}:q
	AuxWaiter   AuxKind = "waiter"   // <P>:{K}:q:<token>, a queued waiter's lease
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

// auxTable is the one list of fixed auxiliary suffixes. No suffix is a
// suffix of another, and each is shorter than a token and starts with
// ':' (which tokens never contain), so a name ends in at most one of them
// and a waiter lease (queue + ":" + token) ends in none: decodeAux is
// unambiguous (see auxBase for the proof that names never collide).
var auxTable = [...]struct {
	kind   AuxKind
	suffix string
}{
	{AuxFence, fenceSuffix}, {AuxQueue, queueSuffix}, {AuxWake, wakeSuffix},
	{AuxReaders, readersSuffix}, {AuxHolds, holdsSuffix}, {AuxPermits, permitsSuffix},
	{AuxLimit, limitSuffix}, {AuxLimitVer, limitVSuffix}, {AuxCount, countSuffix}, {AuxSegments, segsSuffix}, {AuxGuard, guardSuffix},
	{AuxLeader, leaderSuffix}, {AuxElected, electedSuffix},
}

// decodeAux decodes a Redis key (or channel) name that dlock derives from a
// lock key under prefix: it returns that lock key and the name's kind, and
// ok false if name is not exactly such a name (it must be what auxBase
// makes for the key it decodes to, so names dlock never makes are not
// claimed).
func decodeAux(prefix, name string) (key string, kind AuxKind, ok bool) {
	if !strings.HasPrefix(name, prefix+":") {
		return "", "", false
	}
	for _, a := range auxTable {
		if k, ok := keyOfAux(prefix, a.suffix, name); ok && auxBase(prefix, k)+a.suffix == name {
			return k, a.kind, true
		}
	}
	// A waiter lease: "<queue>:<token>".
	if i := strings.LastIndexByte(name, ':'); i > 0 && isToken(name[i+1:]) {
		q := name[:i]
		if k, ok := keyOfAux(prefix, queueSuffix, q); ok && auxBase(prefix, k)+queueSuffix == q {
			return k, AuxWaiter, true
		}
	}
	return "", "", false
}

// AuxKeyOf reports whether name is one of the auxiliary keys or channels
// this Client derives from a lock key (its fence, queue, a waiter's lease,
// wake-up channel, hold sets, semaphore state, Counter count and segment
// count, or the guard record of a resource written with package fenced),
// and if so, of which lock key and of what kind. Lock keys that are such
// names are refused (ErrReservedKey). It makes no Redis call.
func (c *Client) AuxKeyOf(name string) (key string, kind AuxKind, ok bool) {
	return auxKeyOf(c.opts.Prefix, name)
}

// auxKeyOf is decodeAux under prefix, plus the guard records, which are
// always under the default prefix.
func auxKeyOf(prefix, name string) (key string, kind AuxKind, ok bool) {
	if key, kind, ok = decodeAux(prefix, name); ok || prefix == defaults.Prefix {
		return key, kind, ok
	}
	if k, ok := keyOfAux(defaults.Prefix, guardSuffix, name); ok && guardKey(k) == name {
		return k, AuxGuard, true
	}
	return "", "", false
}

// guardKey names the guard record package fenced keeps for the resource
// key: like an auxiliary key of a lock on key under the default prefix, so it
// is in key's Cluster slot and reserved (no lock may be taken on it).
func guardKey(key string) string { return auxBase(defaults.Prefix, key) + guardSuffix }

// The key rules package fenced shares (see internal/keyrules).
func init() {
	keyrules.ValidKey = func(key string) error { return validKey(defaults.Prefix, key) }
	keyrules.GuardKey = guardKey
	keyrules.Unavailable = unavailable
}

// tokenLen is the length of newToken's tokens.
const tokenLen = 22

// isToken reports whether s has the shape of newToken's tokens: tokenLen
// base64url characters.
func isToken(s string) bool {
	if len(s) != tokenLen {
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

// globEscape escapes s for a Redis glob pattern (SCAN MATCH, KEYS,
// PSUBSCRIBE), so it matches itself only.
func globEscape(s string) string {
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

// auxBase returns "<prefix>:<tagged key>", where the tagged key hashes to the
// same Cluster slot as key and can be decoded back to key (see keyOfAux):
//   - key has a non-empty hash tag ("user:{42}:lock"): '#' then the key as
//     it is ("#user:{42}:lock");
//   - key has no '}' at all: the key wrapped in braces ("{orders:1}");
//   - otherwise (e.g. "a}b{" or "{}x"): wrapping would not give the key's own
//     slot, so a short tag known to hash to that slot is put in front:
//     "{<tag>}=<key>".
//
// No two (prefix, key, suffix) triples give one name, for prefixes
// validated by validPrefix (no '{', '}' or '#') and non-empty keys:
//   - the prefix is determined by the name. Say P1 + ":" + T1 + S1 =
//     P2 + ":" + T2 + S2 with len(P1) < len(P2). The byte at index
//     len(P1)+1 is T1[0], '#' or '{'; in the second form that index is
//     inside P2 (which has neither) or is P2's ':' separator: impossible.
//   - the suffix is determined by the name: the fixed suffixes of
//     auxTable all start with ':', none is a suffix of another, and a
//     waiter lease ends in ":q:" + a token (tokenLen base64url bytes, no
//     ':'), longer than every fixed suffix, so no two of them end one name.
//   - the key is determined by the rest: keyOfAux inverts auxBase (the
//     first byte picks the form; in the braced forms the first '}' ends
//     the key (form 2, followed by the suffix's ':') or the tag (form 3,
//     followed by '=')).
//
// So decodeAux is a left inverse of the encoding, which is therefore
// injective; TestAuxNamesInjective and FuzzAuxNames check it.
func auxBase(prefix, key string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(key) + maxAuxExtra)
	writeAuxBase(&b, prefix, key)
	return b.String()
}

// maxAuxExtra bounds what auxBase adds to the prefix and the key: ':',
// the tag's brackets and '=', and a slot tag (at most 4 base-36 digits).
const maxAuxExtra = 8

// writeAuxBase writes auxBase(prefix, key) to b.
func writeAuxBase(b *strings.Builder, prefix, key string) {
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

// keyOfAux decodes an auxiliary name "<prefix>:<tagged key><suffix>" back to
// the lock key; ok is false if name is not of that form.
func keyOfAux(prefix, suffix, name string) (key string, ok bool) {
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

// keysFor names every Redis key and channel a lock on key uses. The lock key
// is the caller's key, untouched, so other SET NX PX clients interoperate on
// it; the auxiliary names carry a hash tag that puts them in the lock key's
// Cluster slot, so one script may touch them all.
func (c *Client) keysFor(key string) protocol.Keys {
	return c.KeysFor(key)
}

// KeysFor returns the names of every Redis key and channel a lock on key
// uses with this Client's prefix (docs/keys.md lists them), for
// tools and for protocols that span several servers.
func (c *Client) KeysFor(key string) protocol.Keys {
	// The three names, one after the other in one string (one allocation,
	// not one per name), each a substring of it. base stays valid as the
	// Builder grows: it never changes bytes it has written.
	var b strings.Builder
	b.Grow(3*(len(c.opts.Prefix)+len(key)+maxAuxExtra) + len(fenceSuffix) + len(wakeSuffix) + len(queueSuffix))
	writeAuxBase(&b, c.opts.Prefix, key)
	base := b.String()
	b.WriteString(fenceSuffix)
	f := b.Len()
	b.WriteString(base)
	b.WriteString(wakeSuffix)
	w := b.Len()
	b.WriteString(base)
	b.WriteString(queueSuffix)
	all := b.String()
	return protocol.Keys{Lock: key, Fence: all[:f], Wake: all[f:w], Queue: all[w:]}
}

// auxOf names another auxiliary key of the lock k: "<prefix>:<tagged
// key><suffix>", in the lock key's slot like k.Fence. It needs no Client.
func auxOf(k protocol.Keys, suffix string) string {
	return strings.TrimSuffix(k.Fence, fenceSuffix) + suffix
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

// newToken returns 128 random bits from crypto/rand, base64url-encoded.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// shortToken is how logs and hooks show a token: enough to correlate, never
// enough to release someone else's lock.
func shortToken(t string) string {
	if len(t) <= 6 {
		return t
	}
	return t[:6] + "…"
}

// validKey checks a lock (or fenced resource) key: not empty, at most
// MaxKeyLength bytes, and, unless prefix is "", not one of the auxiliary
// names dlock derives from another lock key under prefix (ErrReservedKey):
// a lock there would corrupt that lock's state. It makes no Redis call.
func validKey(prefix, key string) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case len(key) > MaxKeyLength:
		return keyTooLong(len(key))
	}
	if prefix == "" {
		return nil
	}
	if lock, kind, ok := auxKeyOf(prefix, key); ok {
		return &reservedKeyError{key: key, lock: lock, kind: kind}
	}
	return nil
}
