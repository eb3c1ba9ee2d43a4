package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlock-go/dlock"
)

func TestStripesMapping(t *testing.T) {
	s, err := dlock.NewStripes("inv", 16)
	if err != nil {
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
	}{{"x", 0, dlock.ErrInvalidCount}, {"", 4, dlock.ErrEmptyKey}, {strings.Repeat("k", dlock.MaxKeyLength), 4, dlock.ErrKeyTooLong}} {
		if _, err := dlock.NewStripes(tc.name, tc.n); !errors.Is(err, tc.want) || !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("NewStripes(%d) = %v", tc.n, err)
		}
	}
	var zero dlock.Stripes
	if zero.Len() != 1 || zero.Index("x") != 0 {
		t.Fatal("zero Stripes")
	}
}

// Many takers over 8 segments: exactly the stock is sold, never more; a
// failing order puts its unit back.
func TestCounterNoOversell(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	ctx := t.Context()
	name := key(t)
	stock, err := c.Counter(name, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := stock.Set(ctx, 203); err != nil {
		t.Fatal(err)
	}
	if n, _ := stock.Total(ctx); n != 203 {
		t.Fatalf("Total = %d", n)
	}
	var sold, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, _ := newClient(t, dlock.Options{})
			st, _ := cl.Counter(name, 8)
			for i := 0; ; i++ {
				_, err := st.Take(ctx, 1, func(ctx context.Context, seg int) error {
					if (w+i)%10 == 0 {
						failed.Add(1)
						return errors.New("payment declined")
					}
					return nil
				})
				switch {
				case errors.Is(err, dlock.ErrExhausted):
					return
				case err != nil && err.Error() == "payment declined":
				case err != nil:
					t.Error(err)
					return
				default:
					sold.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if sold.Load() != 203 {
		t.Fatalf("sold %d of 203", sold.Load())
	}
	if n, _ := stock.Total(ctx); n != 0 {
		t.Fatalf("Total after selling out = %d", n)
	}
	if failed.Load() == 0 {
		t.Fatal("no failing order exercised the put-back")
	}
	if _, err := stock.Take(ctx, 0, nil); !errors.Is(err, dlock.ErrInvalidCount) {
		t.Fatal(err)
	}
}
