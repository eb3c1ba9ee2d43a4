package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestReshardCost measures what a slot's migration costs a lock of that
// slot: on a 3-master Cluster, the slot holds N keys beside a lock in use
// (one Client takes and releases it again and again, each Lock with 30 s
// of ctx) and a lock held throughout; the slot is moved to another master
// at redis-cli's pace (redistest.MoveSlot: 10 keys per MIGRATE, back to
// back). It reports how long the migration took and how long the slot's
// key was out of reach (the longest Lock-and-Unlock cycle that overlapped
// the migration: a Lock waits while the slot's keys are split between the
// masters, and so does an Unlock), both per 1,000 keys; how long after the
// move that cycle ended (the refusal retry's back-off); the calls that
// failed, the refusals ridden out, and whether the held lock was kept. It
// asserts only that the held lock was kept and that the key is taken again
// after the move. By default a smoke run of 200 keys; the measurement:
//
//	DLOCK_RESHARD_KEYS=1000,5000,10000 go test -run 'TestReshardCost$' -v .
func TestReshardCost(t *testing.T) {
	t.Parallel()
	spec := os.Getenv("DLOCK_RESHARD_KEYS")
	if spec == "" {
		spec = "200"
	}
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			t.Fatalf("DLOCK_RESHARD_KEYS: %q", spec)
		}
		t.Run(strconv.Itoa(n), func(t *testing.T) { reshardCost(t, n) })
	}
}

// cycle is one Lock and Unlock of the prober: when Lock was called, how
// long each took, and their errors.
type cycle struct {
	at           time.Time
	lock, unlock time.Duration
	err          error
}

func reshardCost(t *testing.T, n int) {
	ctx := t.Context()
	cl := redistest.StartCluster(t, redistest.ClusterConfig{})
	cc := cl.Client(t)
	c, err := dlock.New(cc, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	key, heldKey := "{rcost}:lock", "{rcost}:held"
	value := strings.Repeat("v", 100)
	for i := 0; i < n; i += 1000 {
		p := cc.Pipeline()
		for j := i; j < min(i+1000, n); j++ {
			p.Set(ctx, fmt.Sprintf("{rcost}:fill:%d", j), value, 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held, err := c.Lock(ctx, heldKey, dlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	slot, err := cl.Slot(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	from, err := cl.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var to *redistest.Server
	for _, m := range cl.Masters(ctx) {
		if m != from {
			to = m
			break
		}
	}

	var mu sync.Mutex
	var probes []cycle
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			start := time.Now()
			lk, err := c.Lock(lctx, key)
			p := cycle{at: start, lock: time.Since(start), err: err}
			cancel()
			if err == nil {
				err = lk.Unlock(ctx)
				p.unlock, p.err = time.Since(start)-p.lock, err
			}
			mu.Lock()
			probes = append(probes, p)
			mu.Unlock()
		}
	})
	time.Sleep(500 * time.Millisecond)
	refusals := c.Stats().Refusals
	m, err := cl.MoveSlot(ctx, slot, to, redistest.MoveOptions{})
	if err != nil {
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	refusals = c.Stats().Refusals - refusals
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	t.Logf("%d keys in the slot: %s; %d refusals ridden out; held lock kept: %v",
		m.Keys, summarize(probes, m), refusals, held.Err() == nil)
	if err := held.Err(); err != nil {
		t.Errorf("a lock held through its slot's migration: %v", err)
	}
	if !takenAfter(probes, m) {
		t.Error("the slot's key was not taken again after the move")
	}
	if err := held.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrLost) {
		t.Error(err)
	}
}

// summarize describes the prober's cycles that overlapped the move m: the
// longest Lock, the longest Unlock, the longest cycle (from Lock's call to
// Unlock's return: how long the key was out of reach) and when it ended,
// each per 1,000 keys moved; and the errors.
func summarize(probes []cycle, m redistest.SlotMove) string {
	var lock, unlock, longest, lag time.Duration
	var during, failed int
	var errs []string
	for _, p := range probes {
		end := p.at.Add(p.lock + p.unlock)
		if !end.After(m.Start) || !p.at.Before(m.End) {
			continue
		}
		during++
		lock, unlock = max(lock, p.lock), max(unlock, p.unlock)
		if p.lock+p.unlock > longest {
			longest, lag = p.lock+p.unlock, end.Sub(m.End)
		}
		if p.err != nil {
			failed++
			if len(errs) < 3 {
				errs = append(errs, p.err.Error())
			}
		}
	}
	per := func(d time.Duration) time.Duration {
		if m.Keys == 0 {
			return 0
		}
		return (d * 1000 / time.Duration(m.Keys)).Round(time.Millisecond)
	}
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("migration %v (%v per 1,000 keys); the slot's key out of reach at most %v (%v per 1,000 keys: "+
		"Lock %v, Unlock %v), until %v after the move; %d cycles during it, %d failed %q",
		ms(m.Duration()), per(m.Duration()), ms(longest), per(longest), ms(lock), ms(unlock), ms(lag), during, failed, errs)
}

// takenAfter reports whether a cycle that began after the move m
// succeeded.
func takenAfter(probes []cycle, m redistest.SlotMove) bool {
	for _, p := range probes {
		if p.at.After(m.End) && p.err == nil {
			return true
		}
	}
	return false
}
