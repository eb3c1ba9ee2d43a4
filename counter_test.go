package dlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlock-go/dlock"
)

// Many takers over 8 segments: exactly the stock is sold, never more; a
// failing order puts its unit back.
func TestCounterNoOversell(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	ctx := t.Context()
	name := key(t)
	stock := c.Counter(name, 8)
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
			st := cl.Counter(name, 8)
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
