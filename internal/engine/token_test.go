package engine

import (
	"encoding/base64"
	"testing"

	"github.com/dlock-go/dlock/internal/keyspace"
)

// TestNewTokenIn: a token encoded in storage of the caller's has the
// shape of NewToken's (keyspace.TokenLen base64url characters of 16 random
// bytes), and is the storage's bytes (TestLockUnlockAllocs counts the
// allocations).
func TestNewTokenIn(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		dst := new([keyspace.TokenLen]byte)
		tok := newTokenIn(dst)
		if !keyspace.IsToken(tok) || len(tok) != len(NewToken()) {
			t.Fatalf("token %q does not have a token's shape", tok)
		}
		if b, err := base64.RawURLEncoding.DecodeString(tok); err != nil || len(b) != 16 {
			t.Fatalf("token %q: %d bytes, %v", tok, len(b), err)
		}
		if tok != string(dst[:]) {
			t.Fatalf("token %q is not its storage's bytes %q", tok, dst[:])
		}
		if seen[tok] {
			t.Fatalf("token %q drawn twice", tok)
		}
		seen[tok] = true
	}
}
