package engine

import (
	"crypto/rand"
	"encoding/base64"
)

// NewToken returns 128 random bits from crypto/rand, base64url-encoded
// (keyspace.TokenLen characters).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ShortToken is how logs and hooks show a token: enough to correlate, never
// enough to release someone else's lock.
func ShortToken(t string) string {
	if len(t) <= 6 {
		return t
	}
	return t[:6] + "…"
}
