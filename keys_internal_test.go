package dlock

import (
	"errors"
	"github.com/dlock-go/dlock/internal/defaults"
	"strings"
	"testing"
)

func TestAuxKeysShareSlotAndDecode(t *testing.T) {
	keys := []string{"orders:1", "user:{42}:lock", "{42}", "a}b{", "{}x", "{}x{y}", "a{b", "}", "{", "{}", "x{}y{z}",
		"plain", "ünïcode", strings.Repeat("k", 1000), "a{b}c}d", "{{a}}", "{=}"}
	for _, k := range keys {
		base := auxBase("dlock", k)
		for _, suffix := range []string{fenceSuffix, wakeSuffix} {
			name := base + suffix
			if Slot(name) != Slot(k) {
				t.Errorf("key %q: aux %q in slot %d, key in slot %d", k, name, Slot(name), Slot(k))
			}
			back, ok := keyOfAux("dlock", suffix, name)
			if !ok || back != k {
				t.Errorf("key %q: aux %q decodes to %q, %v", k, name, back, ok)
			}
		}
	}
	if auxBase("dlock", "orders:1") == auxBase("dlock", "{orders:1}") {
		t.Error("a key and its braced form share auxiliary keys")
	}
}

// Known slots from Redis (CLUSTER KEYSLOT).
func TestSlotMatchesRedis(t *testing.T) {
	for k, want := range map[string]int{"foo": 12182, "bar": 5061, "{user1000}.following": 3443, "{user1000}.followers": 3443, "foo{}{bar}": 8363, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061, "123456789": 12739} {
		if got := Slot(k); got != want {
			t.Errorf("Slot(%q) = %d, want %d", k, got, want)
		}
	}
}

// auxNamesOf lists every auxiliary name of key under prefix, by kind, with
// tok as a waiter lease's token.
func auxNamesOf(prefix, key, tok string) map[string]AuxKind {
	out := map[string]AuxKind{}
	for _, a := range auxTable {
		p := prefix
		if a.kind == AuxGuard {
			p = defaults.Prefix
		}
		out[auxBase(p, key)+a.suffix] = a.kind
	}
	out[auxBase(prefix, key)+queueSuffix+":"+tok] = AuxWaiter
	return out
}

// checkAuxInjective: every name of (p1, k1) decodes back to k1 and its kind,
// is refused as a lock key, and is no name of (p2, k2) unless the pairs are
// equal (then of the same kind).
func checkAuxInjective(t *testing.T, p1, k1, p2, k2 string) {
	if validPrefix(p1) != nil || validPrefix(p2) != nil || p1 == "" || p2 == "" ||
		validKey("", k1) != nil || validKey("", k2) != nil {
		return
	}
	tok := newToken()
	n2 := auxNamesOf(p2, k2, tok)
	for name, kind := range auxNamesOf(p1, k1, tok) {
		k, got, ok := auxKeyOf(p1, name)
		if !ok || k != k1 || got != kind {
			t.Fatalf("prefix %q key %q: %s %q decodes to %q, %q, %v", p1, k1, kind, name, k, got, ok)
		}
		if err := validKey(p1, name); !errors.Is(err, ErrReservedKey) {
			t.Fatalf("prefix %q: lock key %q (the %s of %q) not refused: %v", p1, name, kind, k1, err)
		}
		if kind2, ok := n2[name]; ok && kind != AuxGuard && (p1 != p2 || k1 != k2 || kind != kind2) {
			t.Fatalf("%s %q of (%q, %q) is also the %s of (%q, %q)", kind, name, p1, k1, kind2, p2, k2)
		}
		if kind2, ok := n2[name]; ok && kind == AuxGuard && (k1 != k2 || kind2 != AuxGuard) {
			t.Fatalf("guard %q of %q is also the %s of (%q, %q)", name, k1, kind2, p2, k2)
		}
	}
}

var auxSeeds = [][4]string{
	{"dlock:#x", "t", "dlock", "x:{t}"}, // the alias prefixes with '#' allowed
	{"dlock", "a{b}", "dlock", "a{b}:q"},
	{"dlock", "a{b}:q", "dlock", "a{b}"},
	{"p", "q:{x}", "p:q", "{x}"},
	{"p:", "x", "p", ":{x}"},
	{"dlock", "{x}=y", "dlock", "y"},
	{"dlock", "a}b{", "dlock", "a}b{:fence"},
	{"p[x]", "k", "p[x]", "k:count"},
	{"dlock", "orders", "dlock:{orders}", "fence"},
	{"a", "b:{c}:fence", "a:b", "{c}"},
}

func TestAuxNamesInjective(t *testing.T) {
	for _, s := range auxSeeds {
		checkAuxInjective(t, s[0], s[1], s[2], s[3])
		checkAuxInjective(t, s[2], s[3], s[0], s[1])
	}
	if validPrefix("dlock:#x") == nil {
		t.Error(`prefix "dlock:#x" accepted: with key "t" it names the default prefix's aux keys of "x:{t}"`)
	}
}

// FuzzAuxNames: no two (prefix, key) pairs share an auxiliary name, every
// name decodes back to its lock and kind and is refused as a lock key.
func FuzzAuxNames(f *testing.F) {
	for _, s := range auxSeeds {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, p1, k1, p2, k2 string) {
		checkAuxInjective(t, p1, k1, p2, k2)
		checkAuxInjective(t, p1, k1, p1, k2)
	})
}

// FuzzGlobEscape: an escaped string, as a Redis glob, matches itself only.
func FuzzGlobEscape(f *testing.F) {
	for _, s := range []string{"p[x]", "a*b", `a\b`, "?", "[^a]", "dlock"} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, s, other string) {
		if !isASCII(s) || !isASCII(other) {
			t.Skip() // globRE translates byte by byte
		}
		re, err := globRE(globEscape(s) + ":*")
		if err != nil {
			t.Fatalf("globEscape(%q) = %q: %v", s, globEscape(s), err)
		}
		if !re.MatchString(s + ":k") {
			t.Fatalf("globEscape(%q) = %q does not match itself", s, globEscape(s))
		}
		if !strings.HasPrefix(other, s+":") && re.MatchString(other) {
			t.Fatalf("globEscape(%q) = %q matches %q", s, globEscape(s), other)
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
