package dlockotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/dlock-go/dlock/internal/redistest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
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
	if got := sum(m, "dlock.acquired_after_wait"); got != 1 {
		t.Errorf("acquired after wait %d, want 1", got)
	}
	if _, ok := m["dlock.handoffs"]; ok {
		t.Error("dlock.handoffs is exported; it was dropped for dlock.acquired_after_wait")
	}
	// The waiter was queued (FIFO, the default): the release handed it
	// the key.
	if got, want := sum(m, "dlock.handoffs_received"), int64(e.c.Stats().Handoffs); got != 1 || got != want {
		t.Errorf("handoffs received %d, want 1 (Stats.Handoffs %d)", got, want)
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
	// The holder's Unlock; the lost lock is no release.
	if got, want := sum(m, "dlock.releases"), int64(e.c.Stats().Released); got != 1 || got != want {
		t.Errorf("releases %d, want 1 (Stats.Released %d)", got, want)
	}

	// Units and kinds.
	h := m["dlock.acquire.duration"].(metricdata.Histogram[float64])
	if len(h.DataPoints) == 0 || len(h.DataPoints[0].Bounds) != 18 {
		t.Errorf("acquire histogram bounds: %v", h.DataPoints)
	}
	for _, name := range []string{"dlock.lost", "dlock.releases", "dlock.watchdog.behind", "dlock.renew_reports.dropped", "dlock.pubsub.redials",
		"dlock.acquired_after_wait", "dlock.handoffs_received", "dlock.refusals", "dlock.releases_left", "dlock.releases_resent"} {
		if s, ok := m[name].(metricdata.Sum[int64]); !ok || !s.IsMonotonic {
			t.Errorf("%s is not a monotonic sum: %#v", name, m[name])
		}
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

// TestMetricsStatsCounters: the counters read from Stats equal the
// Client's, and a watchdog whose renewals' replies come late is counted
// behind.
func TestMetricsStatsCounters(t *testing.T) {
	stall := &redistest.PipelineDelay{}
	e := newEnv(t, dlock.Options{RenewInterval: 400 * time.Millisecond})
	e.rdb.AddHook(stall)
	t.Cleanup(func() { stall.Set(0) }) // runs before the Client's Close
	lk, err := e.c.TryLock(t.Context(), key(t), dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := sum(e.collect(t), "dlock.watchdog.behind"); got != 0 {
		t.Fatalf("dlock.watchdog.behind = %d before any delay", got)
	}
	// Each renewal's reply comes 250ms late: more than half the interval.
	stall.Set(250 * time.Millisecond)
	eventually(t, 10*time.Second, "a Behind warning", func() bool {
		return sum(e.collect(t), "dlock.watchdog.behind") >= 1
	})
	stall.Set(0)
	if err := lk.Err(); err != nil {
		t.Fatalf("lost while only late: %v", err)
	}
	// Stats and the collection are read apart; the watchdog may warn
	// between them (at most once a second), so compare until they agree.
	eventually(t, 10*time.Second, "the counters to equal Stats", func() bool {
		st := e.c.Stats()
		m := e.collect(t)
		return sum(m, "dlock.watchdog.behind") == int64(st.Behind) &&
			sum(m, "dlock.renew_reports.dropped") == int64(st.RenewReportsDropped) &&
			sum(m, "dlock.pubsub.redials") == int64(st.PubSubRedials) &&
			sum(m, "dlock.handoffs_received") == int64(st.Handoffs) &&
			sum(m, "dlock.refusals") == int64(st.Refusals) &&
			sum(m, "dlock.releases_left") == int64(st.ReleasesLeft) &&
			sum(m, "dlock.releases_resent") == int64(st.ReleasesResent)
	})
}

// TestMetricsBargingNoHandoff: a barging waiter that gets the key when its
// holder releases it acquired after waiting, but received no FIFO
// hand-off.
func TestMetricsBargingNoHandoff(t *testing.T) {
	e := newEnv(t, dlock.Options{Barging: true})
	ctx := t.Context()
	k := key(t)
	holder, err := e.c.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *dlock.Lock, 1)
	go func() {
		lk, err := e.c.Lock(ctx, k)
		if err != nil {
			t.Error(err)
		}
		done <- lk
	}()
	eventually(t, 5*time.Second, "a waiter", func() bool { return e.c.Stats().Waiting == 1 })
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lk := <-done
	if lk == nil {
		t.FailNow()
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	m := e.collect(t)
	if got := sum(m, "dlock.acquired_after_wait"); got != 1 {
		t.Errorf("acquired after wait %d, want 1", got)
	}
	if got, want := sum(m, "dlock.handoffs_received"), e.c.Stats().Handoffs; got != 0 || want != 0 {
		t.Errorf("handoffs received %d (Stats.Handoffs %d), want 0: a barging waiter is handed nothing", got, want)
	}
}

type statsFunc func() dlock.Stats

func (f statsFunc) Stats() dlock.Stats { return f() }

// TestTrackSums: the observable instruments sum the tracked sources, and
// the counters keep an untracked source's last counts.
func TestTrackSums(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	tel, err := dlockotel.New(dlockotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{reader: reader}

	a := dlock.Stats{Held: 2, Waiting: 1, Behind: 1, RenewReportsDropped: 10, PubSubRedials: 100, Handoffs: 1000, Refusals: 7, ReleasesLeft: 70, ReleasesResent: 30}
	untrackA := tel.Track(statsFunc(func() dlock.Stats { return a }))
	tel.Track(statsFunc(func() dlock.Stats {
		return dlock.Stats{Held: 3, Behind: 2, RenewReportsDropped: 20, PubSubRedials: 200, Handoffs: 2000, Refusals: 5, ReleasesLeft: 50, ReleasesResent: 20}
	}))
	counters := func(m map[string]metricdata.Aggregation) [7]int64 {
		return [7]int64{sum(m, "dlock.watchdog.behind"), sum(m, "dlock.renew_reports.dropped"), sum(m, "dlock.pubsub.redials"),
			sum(m, "dlock.handoffs_received"), sum(m, "dlock.refusals"), sum(m, "dlock.releases_left"),
			sum(m, "dlock.releases_resent")}
	}
	m := e.collect(t)
	if h, w := sum(m, "dlock.held"), sum(m, "dlock.waiting"); h != 5 || w != 1 {
		t.Errorf("held, waiting = %d, %d; want 5, 1", h, w)
	}
	if got, want := counters(m), [7]int64{3, 30, 300, 3000, 12, 120, 50}; got != want {
		t.Errorf("behind, dropped, redials, handoffs, refusals, releases left, resent = %v, want %v", got, want)
	}
	a.Behind, a.RenewReportsDropped, a.PubSubRedials, a.Handoffs, a.Refusals, a.ReleasesLeft, a.ReleasesResent = 4, 40, 400, 4000, 9, 90, 40 // counted until untracked
	untrackA()
	untrackA() // idempotent
	a = dlock.Stats{}
	m = e.collect(t)
	if h, w := sum(m, "dlock.held"), sum(m, "dlock.waiting"); h != 3 || w != 0 {
		t.Errorf("after untrack: held, waiting = %d, %d; want 3, 0", h, w)
	}
	// The counters never go down: an untracked source's counts stay.
	if got, want := counters(m), [7]int64{6, 60, 600, 6000, 14, 140, 60}; got != want {
		t.Errorf("after untrack: behind, dropped, redials, handoffs, refusals, releases left, resent = %v, want %v", got, want)
	}
}
