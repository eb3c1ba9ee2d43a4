package dlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
)

// Once fn has succeeded the sale stands, whatever happens at the release:
// before, an Unlock error (the segment's lock lost inside fn) put the unit
// back, so a second Take sold the same unit again.
func TestCounterTakeUnlockErrorKeepsSale(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t, dlock.Options{})
	name := key(t)
	stock := c.Counter(name, 1)
	if err := stock.Set(ctx, 1); err != nil {
		t.Fatal(err)
	}
	sold := 0
	seg, err := stock.Take(ctx, 1, func(ctx context.Context, seg int) error {
		sold++ // the order is committed...
		// ...and then an operator steals the segment's lock.
		if ok, err := adminOf(t, c).ForceRelease(ctx, name+":0"); !ok || err != nil {
			t.Errorf("ForceRelease = %v, %v", ok, err)
		}
		return nil
	})
	if seg != 0 || !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Take whose release failed = %d, %v; want segment 0 and the release's error", seg, err)
	}
	if n, err := stock.Total(ctx); err != nil || n != 0 {
		t.Fatalf("after a committed sale whose release failed the stock is %d (%v), want 0", n, err)
	}
	if _, err := stock.Take(ctx, 1, func(context.Context, int) error { sold++; return nil }); !errors.Is(err, dlock.ErrExhausted) {
		t.Fatalf("second Take = %v, want ErrExhausted", err)
	}
	if sold != 1 {
		t.Fatalf("one unit sold %d times", sold)
	}

	// fn's own failure still puts the units back.
	if err := stock.Set(ctx, 1); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("order failed")
	if seg, err := stock.Take(ctx, 1, func(context.Context, int) error { return boom }); seg != -1 || !errors.Is(err, boom) {
		t.Fatalf("Take with a failing fn = %d, %v; want -1 and fn's error", seg, err)
	}
	if n, _ := stock.Total(ctx); n != 1 {
		t.Fatalf("after fn failed the stock is %d, want 1 (put back)", n)
	}
}

// A take whose reply was lost may have happened: Take says so (a distinct
// error, with the segment), does not run fn, and puts nothing back. Before,
// it returned a plain "redis unavailable", read as "nothing happened".
func TestCounterTakeLostReplyMayHaveApplied(t *testing.T) {
	ctx := context.Background()
	c, inj := faultyClient(t, dlock.Options{})
	name := key(t)
	stock := c.Counter(name, 1)
	if err := stock.Set(ctx, 3); err != nil {
		t.Fatal(err)
	}
	drop := inj.Add(faultcmd.Rule{Name: "lost take reply", Action: faultcmd.DropReply,
		Match: faultcmd.Match{Script: "counter_add"}})
	ran := false
	seg, err := stock.Take(ctx, 1, func(context.Context, int) error { ran = true; return nil })
	if drop.Fired() != 1 {
		t.Fatalf("the fault fired %d times", drop.Fired())
	}
	if seg != 0 || !errors.Is(err, dlock.ErrMaybeApplied) || errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Take with its reply lost = %d, %v; want segment 0 and ErrMaybeApplied (not ErrUnavailable)", seg, err)
	}
	if ran {
		t.Fatal("fn ran although the take is unknown")
	}
	if n, _ := stock.Total(ctx); n != 2 {
		t.Fatalf("stock %d, want 2: the take ran, and nothing was put back", n)
	}
}
