package engine

import (
	"crypto/rand"
	"encoding/base64"
	"unsafe"

	"github.com/dlock-go/dlock/internal/keyspace"
)

// NewToken returns 128 random bits from crypto/rand, base64url-encoded
// (keyspace.TokenLen characters).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// newTokenIn is NewToken, encoded in dst: the token is dst's bytes, so
// dst must live in the heap and never be written again.
func newTokenIn(dst *[keyspace.TokenLen]byte) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	base64.RawURLEncoding.Encode(dst[:], b[:])
	return unsafe.String(&dst[0], len(dst))
}

// ShortToken is how logs and hooks show a token: enough to correlate, never
// enough to release someone else's lock.
func ShortToken(t string) string {
	if len(t) <= 6 {
		return t
	}
	return t[:6] + "…"
}
