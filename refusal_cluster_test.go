package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestRefusalSlotMigration moves a lock's slot to another master the way
// `redis-cli --cluster reshard` does (redistest.MoveSlot: SETSLOT IMPORTING
// and MIGRATING, MIGRATE, SETSLOT NODE), and holds it migrating before its
// keys move (MoveOptions.Migrating). Meanwhile an acquire of a new key of the slot is
// refused (its keys are on neither master: ASK, then TRYAGAIN from the
// importing one): a Lock with a short ctx fails with its deadline, naming
// the refusal; a Lock with time left is retried until the slot has moved,
// then acquires; a lock held through the migration stays held.
func TestRefusalSlotMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cl := redistest.StartCluster(t, redistest.ClusterConfig{})
	cc := cl.Client(t)
	c, err := dlock.New(cc, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	k, heldKey := "{refmig}:new", "{refmig}:held"
	held, err := c.Lock(ctx, heldKey, dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	slot, err := cl.Slot(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	src, err := cl.MasterOf(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	var dst *redistest.Server
	for _, m := range cl.Masters(ctx) {
		if m != src {
			dst = m
			break
		}
	}
	before := c.Stats().Refusals
	type result struct {
		lk  *dlock.Lock
		err error
	}
	done := make(chan result, 1)
	lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
	defer lcancel()
	migrating := func(context.Context) error {
		// A short ctx: refused until its deadline. The error names the
		// last refusal unless the deadline passed inside go-redis, which
		// retries a refusal a few times itself and then answers with ctx's
		// error (on a loaded machine; TestRefusalUntilDeadline checks the
		// naming).
		sctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		_, err := c.Lock(sctx, k)
		cancel()
		if !errors.Is(err, dlock.ErrContextDone) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock with a 1.5s ctx on a migrating slot = %v; want its deadline", err)
		}
		if !strings.Contains(err.Error(), "TRYAGAIN") && !strings.Contains(err.Error(), "ASK") {
			t.Logf("the deadline passed inside go-redis: %v", err)
		}
		if c.Stats().Refusals == before {
			t.Fatalf("no refusal counted in 1.5s (%v)", err)
		}

		// Time left: retried until the slot has moved.
		go func() {
			lk, err := c.Lock(lctx, k)
			done <- result{lk, err}
		}()
		refused := c.Stats().Refusals
		for deadline := time.Now().Add(20 * time.Second); c.Stats().Refusals < refused+3; {
			select {
			case r := <-done:
				t.Fatalf("Lock returned during the migration: %v, %v", r.lk, r.err)
			case <-time.After(10 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatal("the Lock was not refused during the migration")
			}
		}
		// Past the held lock's TTL, it is renewed meanwhile.
		time.Sleep(2500 * time.Millisecond)
		select {
		case r := <-done:
			t.Fatalf("Lock returned during the migration: %v, %v", r.lk, r.err)
		default:
		}
		return nil
	}
	// Then the slot's keys move, and the slot.
	m, err := cl.MoveSlot(ctx, slot, dst, redistest.MoveOptions{Pipeline: 100, Timeout: 5 * time.Second, Migrating: migrating})
	if err != nil {
		t.Fatal(err)
	}
	moved := m.Migrated

	r := <-done
	t.Logf("Lock acquired %v after the slot moved", time.Since(moved).Round(time.Millisecond))
	if r.err != nil {
		t.Fatalf("Lock with time left, through the migration = %v", r.err)
	}
	if err := r.lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held.Err(); err != nil {
		t.Fatalf("a lock held through its slot's migration: %v", err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("refusals counted: %d", c.Stats().Refusals)
}
