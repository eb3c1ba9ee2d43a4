package dlock

import (
	"errors"
	"github.com/dlock-go/dlock/internal/defaults"
	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/keyspace"
	"testing"
)

// auxNamesOf lists every auxiliary name of key under prefix, by kind, with
// tok as an operation record's id.
func auxNamesOf(prefix, key, tok string) map[string]keyspace.AuxKind {
	out := map[string]keyspace.AuxKind{}
	for _, a := range keyspace.Table {
		p := prefix
		if a.Kind == keyspace.AuxGuard {
			p = defaults.Prefix
		}
		out[keyspace.Base(p, key)+a.Suffix] = a.Kind
	}
	out[keyspace.Base(prefix, key)+keyspace.QueueSuffix+":"+tok] = keyspace.AuxOp
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
	tok := engine.NewToken()
	n2 := auxNamesOf(p2, k2, tok)
	for name, kind := range auxNamesOf(p1, k1, tok) {
		k, got, ok := keyspace.Owner(p1, name)
		if !ok || k != k1 || got != kind {
			t.Fatalf("prefix %q key %q: %s %q decodes to %q, %q, %v", p1, k1, kind, name, k, got, ok)
		}
		if err := validKey(p1, name); !errors.Is(err, ErrReservedKey) {
			t.Fatalf("prefix %q: lock key %q (the %s of %q) not refused: %v", p1, name, kind, k1, err)
		}
		if kind2, ok := n2[name]; ok && kind != keyspace.AuxGuard && (p1 != p2 || k1 != k2 || kind != kind2) {
			t.Fatalf("%s %q of (%q, %q) is also the %s of (%q, %q)", kind, name, p1, k1, kind2, p2, k2)
		}
		if kind2, ok := n2[name]; ok && kind == keyspace.AuxGuard && (k1 != k2 || kind2 != keyspace.AuxGuard) {
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
