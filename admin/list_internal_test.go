package admin

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/keyspace"
)

// FuzzGlobEscape: an escaped string, as a Redis glob, matches itself only.
func FuzzGlobEscape(f *testing.F) {
	for _, s := range []string{"p[x]", "a*b", `a\b`, "?", "[^a]", "dlock"} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, s, other string) {
		if !isASCII(s) || !isASCII(other) {
			t.Skip() // globRE translates byte by byte
		}
		re, err := globRE(keyspace.GlobEscape(s) + ":*")
		if err != nil {
			t.Fatalf("keyspace.GlobEscape(%q) = %q: %v", s, keyspace.GlobEscape(s), err)
		}
		if !re.MatchString(s + ":k") {
			t.Fatalf("keyspace.GlobEscape(%q) = %q does not match itself", s, keyspace.GlobEscape(s))
		}
		if !strings.HasPrefix(other, s+":") && re.MatchString(other) {
			t.Fatalf("keyspace.GlobEscape(%q) = %q matches %q", s, keyspace.GlobEscape(s), other)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
