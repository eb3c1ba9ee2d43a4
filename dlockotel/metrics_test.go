package dlockotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestMetrics(t *testing.T) {
	e := newEnv(t, dlock.Options{RetryInterval: 20 * time.Millisecond})
	ctx := t.Context()
	k := key(t)

	m := e.collect(t)
	if v := sum(m, "dlock.held"); v != 0 {
		t.Errorf("dlock.held = %d before anything, want 0", v)
	}
	// Calls on the Client directly are measured too.
	holder, err := e.c.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.TryLock(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	done := make(chan *dlock.Lock)
	go func() {
		lk, err := e.c.Lock(ctx, k)
		if err != nil {
			t.Error(err)
		}
		done <- lk
	}()
	eventually(t, 5*time.Second, "a waiter", func() bool { return e.c.Stats().Waiting == 1 })
	m = e.collect(t)
	if h, w := sum(m, "dlock.held"), sum(m, "dlock.waiting"); h != 1 || w != 1 {
		t.Errorf("held, waiting = %d, %d; want 1, 1", h, w)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lk := <-done
	if lk == nil {
		t.FailNow()
	}
	// A renewal that finds the key taken: lost, renewals{lost}.
	if err := lk.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Set(ctx, k, "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lk.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrTaken) {
		t.Fatalf("Extend of a taken lock = %v", err)
	}

	m = e.collect(t)
	res := func(r string) attribute.KeyValue { return attribute.String("dlock.acquire.result", r) }
	if got := histCount(m, "dlock.acquire.duration", res("acquired")); got != 2 {
		t.Errorf("acquire{acquired} count %d, want 2", got)
	}
	if got := histCount(m, "dlock.acquire.duration", res("busy")); got != 1 {
		t.Errorf("acquire{busy} count %d, want 1", got)
	}
	if got := histCount(m, "dlock.wait.duration"); got != 1 {
		t.Errorf("wait count %d, want 1", got)
	}
	if got := sum(m, "dlock.handoffs"); got != 1 {
		t.Errorf("handoffs %d, want 1", got)
	}
	if got := histCount(m, "dlock.hold.duration"); got != 2 {
		t.Errorf("hold count %d, want 2 (one release, one loss)", got)
	}
	if got := sum(m, "dlock.lost", attribute.String("dlock.lost.reason", "taken")); got != 1 {
		t.Errorf("lost{taken} %d, want 1", got)
	}
	for r, want := range map[string]int64{"ok": 1, "lost": 1, "error": 0} {
		if got := sum(m, "dlock.renewals", attribute.String("dlock.renewal.result", r)); got != want {
			t.Errorf("renewals{%s} %d, want %d", r, got, want)
		}
	}
	if h, w := sum(m, "dlock.held"), sum(m, "dlock.waiting"); h != 0 || w != 0 {
		t.Errorf("held, waiting = %d, %d; want 0, 0", h, w)
	}

	// Units and kinds.
	h := m["dlock.acquire.duration"].(metricdata.Histogram[float64])
	if len(h.DataPoints) == 0 || len(h.DataPoints[0].Bounds) != 18 {
		t.Errorf("acquire histogram bounds: %v", h.DataPoints)
	}
	if s := m["dlock.lost"].(metricdata.Sum[int64]); !s.IsMonotonic {
		t.Error("dlock.lost is not monotonic")
	}
	if s := m["dlock.held"].(metricdata.Sum[int64]); s.IsMonotonic {
		t.Error("dlock.held is monotonic")
	}
}

// TestMetricsTimeout checks the timeout and canceled results.
func TestMetricsTimeout(t *testing.T) {
	e := newEnv(t, dlock.Options{})
	ctx := t.Context()
	k := key(t)
	holder, err := e.c.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Unlock(ctx)
	tctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	_, _ = e.c.Lock(tctx, k)
	cctx, cancel2 := context.WithCancel(ctx)
	cancel2()
	_, _ = e.c.Lock(cctx, k)
	m := e.collect(t)
	for _, r := range []string{"timeout", "canceled"} {
		if got := histCount(m, "dlock.acquire.duration", attribute.String("dlock.acquire.result", r)); got != 1 {
			t.Errorf("acquire{%s} count %d, want 1", r, got)
		}
	}
}
