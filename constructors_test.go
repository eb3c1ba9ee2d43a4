package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/stripe"
)

// The constructor rule (see Client): a handle's constructor never fails
// and never calls Redis; a bad argument is returned, errors.Is-able, by
// every method of the handle, each time, and nothing panics.
func TestConstructorsReportBadArgsFromMethods(t *testing.T) {
	ctx := t.Context()
	rt := &roundTrips{}
	rdb := srv.NewClient()
	rdb.AddHook(rt)
	c, _ := newClientOn(t, rdb, dlock.Options{})
	long := strings.Repeat("k", dlock.MaxKeyLength+1)
	before := rt.n.Load()

	counters := []struct {
		name string
		segs int
		want error
	}{
		{"x", 0, dlock.ErrInvalidCount},
		{"x", -3, dlock.ErrInvalidCount},
		{"", 2, dlock.ErrEmptyKey},
		{long, 2, dlock.ErrKeyTooLong},
	}
	for _, tc := range counters {
		ctr := c.Counter(tc.name, tc.segs)
		for range 2 { // each time, not once
			if err := ctr.Set(ctx, 1); !errors.Is(err, tc.want) || !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("Counter(%.8q, %d).Set = %v, want %v", tc.name, tc.segs, err, tc.want)
			}
			if seg, err := ctr.Take(ctx, 1, nil); seg != -1 || !errors.Is(err, tc.want) {
				t.Errorf("Counter(%.8q, %d).Take = %d, %v, want -1, %v", tc.name, tc.segs, seg, err, tc.want)
			}
			if n, err := ctr.Total(ctx); n != 0 || !errors.Is(err, tc.want) {
				t.Errorf("Counter(%.8q, %d).Total = %d, %v, want %v", tc.name, tc.segs, n, err, tc.want)
			}
		}
	}

	elections := []struct {
		name string
		opts dlock.ElectionOptions
		want error
	}{
		{"", dlock.ElectionOptions{}, dlock.ErrEmptyKey},
		{long, dlock.ElectionOptions{}, dlock.ErrKeyTooLong},
		{adminOf(t, c).KeysFor("x").Fence, dlock.ElectionOptions{}, dlock.ErrReservedKey},
		{"x", dlock.ElectionOptions{TTL: time.Microsecond}, dlock.ErrInvalidTTL},
		{"x", dlock.ElectionOptions{PollInterval: -1}, dlock.ErrInvalidOpts},
	}
	for _, tc := range elections {
		e := c.Election(tc.name, tc.opts)
		for range 2 {
			if l, err := e.Campaign(ctx, "v"); l != nil || !errors.Is(err, tc.want) || !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("Election(%.8q, %+v).Campaign = %v, %v, want %v", tc.name, tc.opts, l, err, tc.want)
			}
			if _, err := e.Leader(ctx); !errors.Is(err, tc.want) {
				t.Errorf("Election(%.8q, %+v).Leader = %v, want %v", tc.name, tc.opts, err, tc.want)
			}
			ran := false
			err := e.Run(ctx, "v", dlock.RunConfig{OnStartedLeading: func(context.Context, *dlock.Leadership) { ran = true }})
			if ran || !errors.Is(err, tc.want) {
				t.Errorf("Election(%.8q, %+v).Run = %v (ran %v), want %v", tc.name, tc.opts, err, ran, tc.want)
			}
			select {
			case li, ok := <-e.Observe(ctx):
				if ok {
					t.Errorf("Election(%.8q, %+v).Observe delivered %+v", tc.name, tc.opts, li)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("Election(%.8q, %+v).Observe's channel is open", tc.name, tc.opts)
			}
		}
		if e.Name() != tc.name {
			t.Errorf("Name = %q", e.Name())
		}
	}

	// An invalid stripe set names no lock: dlock refuses its keys.
	bad := stripe.New("x", 0)
	if !errors.Is(bad.Err(), dlock.ErrInvalidCount) {
		t.Errorf("stripe.New(x, 0).Err() = %v", bad.Err())
	}
	if _, err := c.TryLock(ctx, bad.Key("sku:1")); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("TryLock(an invalid stripe's key) = %v", err)
	}
	if _, err := c.TryLockMulti(ctx, bad.Keys("sku:1", "sku:2")); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("TryLockMulti(an invalid stripe's keys) = %v", err)
	}

	// The older handles follow the same rule.
	if _, err := c.RWLock("").TryLock(ctx); !errors.Is(err, dlock.ErrEmptyKey) {
		t.Errorf("RWLock(\"\").TryLock = %v", err)
	}
	if _, err := c.Semaphore("s", 0).TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrInvalidLimit) {
		t.Errorf("Semaphore(s, 0).TryAcquire = %v", err)
	}
	if _, err := c.Reentrant(long).TryLock(ctx, "o"); !errors.Is(err, dlock.ErrKeyTooLong) {
		t.Errorf("Reentrant(long).TryLock = %v", err)
	}

	// None of it reached Redis.
	if n := rt.n.Load() - before; n != 0 {
		t.Errorf("%d commands sent for handles with bad arguments", n)
	}

	// A nil Client's handles report ErrNilClient.
	var nilc *dlock.Client
	if err := nilc.Counter("x", 1).Set(ctx, 1); !errors.Is(err, dlock.ErrNilClient) {
		t.Errorf("nil Client's Counter.Set = %v", err)
	}
	if _, err := nilc.Election("x", dlock.ElectionOptions{}).Leader(ctx); !errors.Is(err, dlock.ErrNilClient) {
		t.Errorf("nil Client's Election.Leader = %v", err)
	}
	var nile *dlock.Election
	if _, err := nile.Campaign(ctx, "v"); !errors.Is(err, dlock.ErrNilClient) {
		t.Errorf("nil Election's Campaign = %v", err)
	}
	if _, ok := <-nile.Observe(ctx); ok {
		t.Error("nil Election's Observe delivered")
	}
	var nilctr *dlock.Counter
	if _, err := nilctr.Total(ctx); !errors.Is(err, dlock.ErrNilClient) {
		t.Errorf("nil Counter's Total = %v", err)
	}
}
