package stripe_test

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/dlock-go/dlock/stripe"
)

func TestMapping(t *testing.T) {
	s := stripe.New("inv", 16)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	counts := make([]int, 16)
	for i := range 16000 {
		k := fmt.Sprintf("sku:%d", i)
		idx := s.Index(k)
		if idx != s.Index(k) || idx < 0 || idx >= 16 {
			t.Fatalf("Index(%q) = %d", k, idx)
		}
		// The documented mapping: FNV-1a 64 of the key (no hash tag) mod n.
		h := fnv.New64a()
		h.Write([]byte(k))
		if want := int(h.Sum64() % 16); idx != want {
			t.Fatalf("Index(%q) = %d, FNV-1a says %d", k, idx, want)
		}
		if s.Key(k) != fmt.Sprintf("inv:%d", idx) {
			t.Fatalf("Key(%q) = %q", k, s.Key(k))
		}
		counts[idx]++
	}
	for i, n := range counts {
		if n < 800 || n > 1200 {
			t.Fatalf("stripe %d got %d of 16000 keys", i, n)
		}
	}
	// Hash-tag aware: keys sharing a tag share a stripe.
	if s.Index("user:{42}:cart") != s.Index("user:{42}:orders") || s.Index("user:{42}:cart") != s.Index("42") {
		t.Fatal("keys with one hash tag on different stripes")
	}
	ks := s.Keys("user:{42}:cart", "user:{42}:orders", "sku:1", "sku:1")
	if len(ks) > 2 || !strings.HasPrefix(ks[0], "inv:") {
		t.Fatalf("Keys = %v", ks)
	}
	for _, tc := range []struct {
		name string
		n    int
		want error
	}{{"x", 0, dlock.ErrInvalidCount}, {"", 4, dlock.ErrEmptyKey}, {strings.Repeat("k", keyrules.MaxKeyLength), 4, dlock.ErrKeyTooLong}} {
		s := stripe.New(tc.name, tc.n)
		if err := s.Err(); !errors.Is(err, tc.want) || !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("New(%d).Err() = %v", tc.n, err)
		}
		// An invalid Set never names a lock key: every key is "", which
		// dlock refuses.
		if s.Len() != 1 || s.Index("x") != 0 || s.Stripe(0) != "" || s.Key("x") != "" ||
			len(s.Keys("a", "b")) != 1 || s.Keys("a", "b")[0] != "" || len(s.Keys()) != 0 {
			t.Errorf("New(%q, %d): Len %d, Stripe(0) %q, Key %q, Keys %q", tc.name, tc.n, s.Len(), s.Stripe(0), s.Key("x"), s.Keys("a", "b"))
		}
	}
	var zero stripe.Set
	if zero.Len() != 1 || zero.Index("x") != 0 {
		t.Fatal("zero Set")
	}
}
