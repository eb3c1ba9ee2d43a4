package dlock

import (
	"crypto/rand"
	"encoding/base64"
	"strconv"
	"strings"
	"sync"
)

const (
	fenceSuffix = ":fence"
	wakeSuffix  = ":wake"
	queueSuffix = ":q"
)

// auxBase returns "<prefix>:<tagged key>", where the tagged key hashes to the
// same Cluster slot as key and can be decoded back to key (see keyOfAux):
//   - key has a non-empty hash tag ("user:{42}:lock"): '#' then the key as
//     it is ("#user:{42}:lock");
//   - key has no '}' at all: the key wrapped in braces ("{orders:1}");
//   - otherwise (e.g. "a}b{" or "{}x"): wrapping would not give the key's own
//     slot, so a short tag known to hash to that slot is put in front:
//     "{<tag>}=<key>".
func auxBase(prefix, key string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(key) + 8)
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
	return b.String()
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
func (c *Client) keysFor(key string) Keys {
	return c.KeysFor(key)
}

// KeysFor returns the names of every Redis key and channel a lock on key
// uses with this Client's prefix (see the package doc's key layout), for
// tools and for protocols that span several servers.
func (c *Client) KeysFor(key string) Keys {
	base := auxBase(c.opts.Prefix, key)
	return Keys{Lock: key, Fence: base + fenceSuffix, Wake: base + wakeSuffix, Queue: base + queueSuffix}
}

// auxOf names another auxiliary key of the lock k: "<prefix>:<tagged
// key><suffix>", in the lock key's slot like k.Fence. It needs no Client.
func auxOf(k Keys, suffix string) string {
	return strings.TrimSuffix(k.Fence, fenceSuffix) + suffix
}

// hashTag returns the part of key Redis Cluster hashes: the text between the
// first '{' and the first '}' after it, if non-empty; else "".
func hashTag(key string) string {
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

func validKey(key string) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case len(key) > MaxKeyLength:
		return ErrKeyTooLong
	}
	return nil
}
