package dlockprom_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockprom"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
)

// scrape is one Gather of a pedantic registry holding only the collector
// (pedantic: it also checks Describe against Collect).
type scrape map[string]*dto.MetricFamily

func gather(t *testing.T, c prometheus.Collector) scrape {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	s := scrape{}
	for _, mf := range mfs {
		s[mf.GetName()] = mf
	}
	return s
}

// metric returns the series of family name whose labels include every
// name=value pair of labels, or nil.
func (s scrape) metric(name string, labels ...string) *dto.Metric {
	mf := s[name]
	if mf == nil {
		return nil
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

// count is the sample count of a histogram series (0 if absent).
func (s scrape) count(name string, labels ...string) uint64 {
	return s.metric(name, labels...).GetHistogram().GetSampleCount()
}

// value is the value of a counter or gauge series (0 if absent).
func (s scrape) value(name string, labels ...string) float64 {
	m := s.metric(name, labels...)
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return 0
}

// newInstrumented returns a Collector and a Client over srv that feeds and
// is tracked by it.
func newInstrumented(t *testing.T, opts dlockprom.Opts, copts dlock.Options) (*dlockprom.Collector, *dlock.Client, *redis.Client) {
	t.Helper()
	m := dlockprom.NewCollector(opts)
	c, rdb := newClient(t, srv.Addr(), copts)
	c.AddHooks(m.Hooks())
	m.Track(c)
	return m, c, rdb
}

func TestLint(t *testing.T) {
	for name, opts := range map[string]dlockprom.Opts{
		"default":   {},
		"key label": {KeyLabel: func(string) string { return "k" }, ConstLabels: prometheus.Labels{"client": "a"}},
	} {
		t.Run(name, func(t *testing.T) {
			m := dlockprom.NewCollector(opts)
			// Feed every hook once so that every family has a series.
			h := m.Hooks()
			h.Acquire(bg, dlock.AcquireInfo{Key: "a:1", Waited: true})
			h.Release(bg, dlock.ReleaseInfo{Key: "a:1"})
			h.Renew(bg, dlock.RenewInfo{Key: "a:1"})
			h.Lost(bg, dlock.LostInfo{Key: "a:1", Cause: dlock.ErrExpired})
			problems, err := testutil.CollectAndLint(m)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Errorf("lint: %s: %s", p.Metric, p.Text)
			}
			if n := testutil.CollectAndCount(m); n == 0 {
				t.Fatal("no metrics collected")
			}
		})
	}
}

// TestZeroValues checks names, help, types and that every label value is
// exported at 0 before anything happened.
func TestZeroValues(t *testing.T) {
	m := dlockprom.NewCollector(dlockprom.Opts{})
	const want = `
# HELP dlock_acquired_after_wait_total Lock calls that found the key held, waited, and acquired it (by a hand-off, a release or an expiry).
# TYPE dlock_acquired_after_wait_total counter
dlock_acquired_after_wait_total 0
# HELP dlock_handoffs_received_total FIFO hand-offs received by queued Lock calls of the tracked clients (Stats.Handoffs).
# TYPE dlock_handoffs_received_total counter
dlock_handoffs_received_total 0
# HELP dlock_held Locks held now by the tracked clients.
# TYPE dlock_held gauge
dlock_held 0
# HELP dlock_pubsub_redials_total Pub/sub connections of the tracked clients replaced because they missed their liveness probe.
# TYPE dlock_pubsub_redials_total counter
dlock_pubsub_redials_total 0
# HELP dlock_refusals_total Calls a Redis node refused before running them during a Cluster topology change (TRYAGAIN, ASK, MOVED...), sent again (Stats.Refusals).
# TYPE dlock_refusals_total counter
dlock_refusals_total 0
# HELP dlock_releases_left_total Locks of the tracked clients whose release no reply confirmed before their deadline, left to expire by their TTL (Stats.ReleasesLeft).
# TYPE dlock_releases_left_total counter
dlock_releases_left_total 0
# HELP dlock_releases_resent_total Releases of the tracked clients sent again after the client reached a new Sentinel master, which may have lost them (Stats.ReleasesResent).
# TYPE dlock_releases_resent_total counter
dlock_releases_resent_total 0
# HELP dlock_releases_total Locks released by Unlock (not lost).
# TYPE dlock_releases_total counter
dlock_releases_total 0
# HELP dlock_renew_reports_dropped_total Watchdog renewals of the tracked clients not reported to the Renew hook, which fell too far behind.
# TYPE dlock_renew_reports_dropped_total counter
dlock_renew_reports_dropped_total 0
# HELP dlock_lost_total Locks lost while held, by reason (expired, taken, unreachable).
# TYPE dlock_lost_total counter
dlock_lost_total{reason="expired"} 0
dlock_lost_total{reason="taken"} 0
dlock_lost_total{reason="unreachable"} 0
# HELP dlock_renewals_total Lock renewal attempts, by result (ok, error, lost).
# TYPE dlock_renewals_total counter
dlock_renewals_total{result="error"} 0
dlock_renewals_total{result="lost"} 0
dlock_renewals_total{result="ok"} 0
# HELP dlock_waiting Lock calls of the tracked clients waiting for a key now.
# TYPE dlock_waiting gauge
dlock_waiting 0
# HELP dlock_watchdog_behind_total Warnings that the watchdog of a tracked client fell behind its renewals (Hooks.Behind).
# TYPE dlock_watchdog_behind_total counter
dlock_watchdog_behind_total 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want),
		"dlock_held", "dlock_lost_total", "dlock_renewals_total", "dlock_waiting",
		"dlock_releases_total", "dlock_watchdog_behind_total", "dlock_renew_reports_dropped_total", "dlock_pubsub_redials_total",
		"dlock_acquired_after_wait_total", "dlock_handoffs_received_total", "dlock_refusals_total",
		"dlock_releases_left_total", "dlock_releases_resent_total"); err != nil {
		t.Error(err)
	}
	for name, n := range map[string]int{
		"dlock_acquire_duration_seconds": 5, // one series per result
		"dlock_wait_duration_seconds":    1,
		"dlock_hold_duration_seconds":    1,
	} {
		if got := testutil.CollectAndCount(m, name); got != n {
			t.Errorf("%s: %d series, want %d", name, got, n)
		}
	}
	s := gather(t, m)
	if b := s.metric("dlock_acquire_duration_seconds", "result", "acquired").GetHistogram().GetBucket(); len(b) != len(dlockprom.DefaultDurationBuckets) {
		t.Errorf("acquire histogram has %d buckets, want %d", len(b), len(dlockprom.DefaultDurationBuckets))
	}
	if b := s.metric("dlock_hold_duration_seconds").GetHistogram().GetBucket(); len(b) != len(dlockprom.DefaultHoldBuckets) {
		t.Errorf("hold histogram has %d buckets, want %d", len(b), len(dlockprom.DefaultHoldBuckets))
	}
}

// TestAcquireResults drives every acquire outcome against a real Redis and
// checks the histograms, the hand-off counter and the gauges.
func TestAcquireResults(t *testing.T) {
	ctx := t.Context()
	m, c, rdb := newInstrumented(t, dlockprom.Opts{}, dlock.Options{RetryInterval: 50 * time.Millisecond})
	k := key(t)

	// acquired
	held, err := c.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if got := gather(t, m).value("dlock_held"); got != 1 {
		t.Errorf("dlock_held = %v while holding, want 1", got)
	}
	// busy
	if _, err := c.TryLock(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock on a held key: %v", err)
	}
	// timeout
	tctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, err = c.Lock(tctx, k)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a deadline on a held key: %v", err)
	}
	// canceled, while waiting: the waiting gauge shows the call
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Lock(cctx, k)
		errc <- err
	}()
	eventually(t, 5*time.Second, "dlock_waiting to be 1", func() bool {
		return gather(t, m).value("dlock_waiting") == 1
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v", err)
	}
	// error: the key holds a hash, not a lock
	wk := key(t)
	if err := rdb.HSet(ctx, wk, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, wk); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("TryLock on a hash: %v", err)
	}
	// hand-off: a waiter gets the key when the holder releases it
	lockc := make(chan *dlock.Lock, 1)
	go func() {
		lk, err := c.Lock(ctx, k)
		if err != nil {
			t.Error(err)
		}
		lockc <- lk
	}()
	eventually(t, 5*time.Second, "a waiter", func() bool { return c.Stats().Waiting == 1 })
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if lk := <-lockc; lk != nil {
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	s := gather(t, m)
	for result, want := range map[string]uint64{
		"acquired": 2, "busy": 1, "timeout": 1, "canceled": 1, "error": 1,
	} {
		if got := s.count("dlock_acquire_duration_seconds", "result", result); got != want {
			t.Errorf("acquire{result=%q}: %d observations, want %d", result, got, want)
		}
	}
	// timeout, canceled and the hand-off waited; nothing else did.
	if got := s.count("dlock_wait_duration_seconds"); got != 3 {
		t.Errorf("wait: %d observations, want 3", got)
	}
	if got := s.value("dlock_acquired_after_wait_total"); got != 1 {
		t.Errorf("acquired after wait = %v, want 1", got)
	}
	if _, ok := s["dlock_handoffs_total"]; ok {
		t.Error("dlock_handoffs_total is exported; it was dropped for dlock_acquired_after_wait_total")
	}
	// The waiter was queued (FIFO, the default): the release handed it
	// the key.
	if got, want := s.value("dlock_handoffs_received_total"), float64(c.Stats().Handoffs); got != 1 || got != want {
		t.Errorf("handoffs received = %v, want 1 (Stats.Handoffs %v)", got, want)
	}
	if got := s.count("dlock_hold_duration_seconds"); got != 2 {
		t.Errorf("hold: %d observations, want 2", got)
	}
	if got, want := s.value("dlock_releases_total"), float64(c.Stats().Released); got != 2 || got != want {
		t.Errorf("releases = %v, want 2 (Stats.Released %v)", got, want)
	}
	if got := s.value("dlock_held"); got != 0 {
		t.Errorf("dlock_held = %v after releasing everything, want 0", got)
	}
	if got := s.value("dlock_waiting"); got != 0 {
		t.Errorf("dlock_waiting = %v, want 0", got)
	}
	// The timeout's wait lasted at least its 30ms deadline: it is not in the
	// 25ms bucket (and, on any sane machine, in the 1s one).
	var le25, le1 uint64
	for _, b := range s.metric("dlock_acquire_duration_seconds", "result", "timeout").GetHistogram().GetBucket() {
		switch b.GetUpperBound() {
		case .025:
			le25 = b.GetCumulativeCount()
		case 1:
			le1 = b.GetCumulativeCount()
		}
	}
	if le25 != 0 || le1 != 1 {
		t.Errorf("timeout buckets: le=0.025 %d, le=1 %d; want 0 and 1", le25, le1)
	}
}

// TestLost checks the expired and taken reasons, and that a lost lock's hold
// time is observed once (not again by the Unlock that finds it lost).
func TestLost(t *testing.T) {
	ctx := t.Context()
	m, c, rdb := newInstrumented(t, dlockprom.Opts{}, dlock.Options{})

	// expired: no renewal, a 30ms TTL
	lk, err := c.TryLock(ctx, key(t), dlock.WithTTL(30*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lock not lost after its TTL")
	}
	if !errors.Is(lk.Err(), dlock.ErrExpired) {
		t.Fatalf("Err = %v, want ErrExpired", lk.Err())
	}
	if err := lk.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Unlock of an expired lock: %v", err)
	}

	// taken: somebody else's token in the key; Unlock finds out
	k := key(t)
	lk, err = c.TryLock(ctx, k, dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, k, "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); !errors.Is(err, dlock.ErrTaken) {
		t.Fatalf("Unlock of a taken lock: %v", err)
	}

	// The expiry's Lost hook runs on a reporting goroutine, after Done.
	eventually(t, 5*time.Second, "the expiry counted", func() bool {
		return gather(t, m).value("dlock_lost_total", "reason", "expired") == 1
	})
	s := gather(t, m)
	for reason, want := range map[string]float64{"expired": 1, "taken": 1, "unreachable": 0} {
		if got := s.value("dlock_lost_total", "reason", reason); got != want {
			t.Errorf("lost{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if got := s.count("dlock_hold_duration_seconds"); got != 2 {
		t.Errorf("hold: %d observations, want 2 (one per lost lock)", got)
	}
	if got := s.value("dlock_releases_total"); got != 0 {
		t.Errorf("releases = %v, want 0 (both locks were lost)", got)
	}
	if got := s.value("dlock_held"); got != 0 {
		t.Errorf("dlock_held = %v, want 0", got)
	}
}

// TestRenewals checks ok renewals, then a renewal that finds the key gone.
func TestRenewals(t *testing.T) {
	ctx := t.Context()
	m, c, rdb := newInstrumented(t, dlockprom.Opts{}, dlock.Options{})
	k := key(t)
	lk, err := c.Lock(ctx, k, dlock.WithTTL(150*time.Millisecond)) // renewed every 50ms
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "two renewals", func() bool {
		return gather(t, m).value("dlock_renewals_total", "result", "ok") >= 2
	})
	if err := rdb.Del(ctx, k).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a lost renewal", func() bool {
		return gather(t, m).value("dlock_renewals_total", "result", "lost") == 1
	})
	<-lk.Done()
	// The Lost hook that counts the loss runs just after Done closes.
	eventually(t, 5*time.Second, "the loss counted", func() bool {
		return gather(t, m).value("dlock_lost_total", "reason", "expired") == 1
	})
	s := gather(t, m)
	if got := s.value("dlock_lost_total", "reason", "expired"); got != 1 {
		t.Errorf("lost{reason=expired} = %v, want 1", got)
	}
	if got := s.value("dlock_renewals_total", "result", "error"); got != 0 {
		t.Errorf("renewals{result=error} = %v, want 0", got)
	}
}

// TestUnreachable cuts the network between the Client and Redis while a
// lock is held: renewals fail, then the lock is lost as unreachable.
func TestUnreachable(t *testing.T) {
	ctx := t.Context()
	px := redistest.NewProxy(t, srv.Addr())
	m := dlockprom.NewCollector(dlockprom.Opts{})
	rdb := redis.NewClient(&redis.Options{
		Addr:        px.Addr(),
		DialTimeout: 100 * time.Millisecond, ReadTimeout: 40 * time.Millisecond, WriteTimeout: 40 * time.Millisecond,
		ContextTimeoutEnabled: true, MaxRetries: -1,
	})
	c, err := dlock.New(rdb, dlock.Options{Hooks: m.Hooks()}) // at New: the other way in
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		px.Blackhole(false)
		_ = c.Close()
		_ = rdb.Close()
	})
	m.Track(c)

	lk, err := c.TryLock(ctx, key(t), dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	px.Blackhole(true)
	select {
	case <-lk.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lock not lost with Redis unreachable")
	}
	if !errors.Is(lk.Err(), dlock.ErrUnreachable) {
		t.Fatalf("Err = %v, want ErrUnreachable", lk.Err())
	}
	eventually(t, 5*time.Second, "the loss counted", func() bool {
		return gather(t, m).value("dlock_lost_total", "reason", "unreachable") == 1
	})
	s := gather(t, m)
	if got := s.value("dlock_lost_total", "reason", "unreachable"); got != 1 {
		t.Errorf("lost{reason=unreachable} = %v, want 1", got)
	}
	if got := s.value("dlock_renewals_total", "result", "error"); got < 1 {
		t.Errorf("renewals{result=error} = %v, want at least 1", got)
	}
	if got := s.value("dlock_held"); got != 0 {
		t.Errorf("dlock_held = %v, want 0", got)
	}
}

// TestKeyLabel checks the opt-in key label on the hook-fed metrics, and that
// the gauges never get it.
func TestKeyLabel(t *testing.T) {
	ctx := t.Context()
	prefix := func(k string) string { p, _, _ := strings.Cut(k, ":"); return p }
	m, c, _ := newInstrumented(t, dlockprom.Opts{KeyLabel: prefix}, dlock.Options{})
	base := key(t)
	for _, k := range []string{"orders:" + base, "orders:x" + base, "users:" + base} {
		lk, err := c.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s := gather(t, m)
	if got := s.count("dlock_acquire_duration_seconds", "result", "acquired", "key", "orders"); got != 2 {
		t.Errorf("acquire{key=orders}: %d observations, want 2", got)
	}
	if got := s.count("dlock_hold_duration_seconds", "key", "users"); got != 1 {
		t.Errorf("hold{key=users}: %d observations, want 1", got)
	}
	for _, g := range []string{"dlock_held", "dlock_waiting"} {
		if l := s.metric(g).GetLabel(); len(l) != 0 {
			t.Errorf("%s has labels %v, want none", g, l)
		}
	}
	// A mapper returning invalid UTF-8 must not make the hook panic.
	bad := dlockprom.NewCollector(dlockprom.Opts{KeyLabel: func(string) string { return "\xff" }})
	bad.Hooks().Acquire(bg, dlock.AcquireInfo{Key: "k"})
	if got := gather(t, bad).count("dlock_acquire_duration_seconds", "key", "\uFFFD"); got != 1 {
		t.Errorf("acquire{key=U+FFFD}: %d observations, want 1", got)
	}
}

// statsFunc is a StatsSource that is not comparable, which Track must
// accept.
type statsFunc func() dlock.Stats

func (f statsFunc) Stats() dlock.Stats { return f() }

func TestTrackSums(t *testing.T) {
	m := dlockprom.NewCollector(dlockprom.Opts{ConstLabels: prometheus.Labels{"client": "test"}})
	a := dlock.Stats{Held: 2, Waiting: 1, Behind: 1, RenewReportsDropped: 10, PubSubRedials: 100, Handoffs: 1000, Refusals: 7, ReleasesLeft: 70, ReleasesResent: 30}
	untrackA := m.Track(statsFunc(func() dlock.Stats { return a }))
	m.Track(statsFunc(func() dlock.Stats {
		return dlock.Stats{Held: 3, Behind: 2, RenewReportsDropped: 20, PubSubRedials: 200, Handoffs: 2000, Refusals: 5, ReleasesLeft: 50, ReleasesResent: 20}
	}))
	counters := func(s scrape) [7]float64 {
		return [7]float64{
			s.value("dlock_watchdog_behind_total", "client", "test"),
			s.value("dlock_renew_reports_dropped_total", "client", "test"),
			s.value("dlock_pubsub_redials_total", "client", "test"),
			s.value("dlock_handoffs_received_total", "client", "test"),
			s.value("dlock_refusals_total", "client", "test"),
			s.value("dlock_releases_left_total", "client", "test"),
			s.value("dlock_releases_resent_total", "client", "test"),
		}
	}
	s := gather(t, m)
	if h, w := s.value("dlock_held", "client", "test"), s.value("dlock_waiting", "client", "test"); h != 5 || w != 1 {
		t.Errorf("held, waiting = %v, %v; want 5, 1", h, w)
	}
	if got, want := counters(s), [7]float64{3, 30, 300, 3000, 12, 120, 50}; got != want {
		t.Errorf("behind, dropped, redials, handoffs, refusals, releases left, resent = %v, want %v", got, want)
	}
	a.Behind, a.RenewReportsDropped, a.PubSubRedials, a.Handoffs, a.Refusals, a.ReleasesLeft, a.ReleasesResent = 4, 40, 400, 4000, 9, 90, 40 // counted until untracked
	untrackA()
	untrackA() // idempotent
	a = dlock.Stats{}
	s = gather(t, m)
	if h, w := s.value("dlock_held"), s.value("dlock_waiting"); h != 3 || w != 0 {
		t.Errorf("after untrack: held, waiting = %v, %v; want 3, 0", h, w)
	}
	// The counters never go down: an untracked source's counts stay.
	if got, want := counters(s), [7]float64{6, 60, 600, 6000, 14, 140, 60}; got != want {
		t.Errorf("after untrack: behind, dropped, redials, handoffs, refusals, releases left, resent = %v, want %v", got, want)
	}
}

// TestStatsCounters: the counters read from Stats equal the Client's, and
// a watchdog whose renewals' replies come late is counted behind.
func TestStatsCounters(t *testing.T) {
	m := dlockprom.NewCollector(dlockprom.Opts{})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	stall := &redistest.PipelineDelay{}
	rdb.AddHook(stall)
	c, err := dlock.New(rdb, dlock.Options{RenewInterval: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stall.Set(0)
		_ = c.Close()
		_ = rdb.Close()
	})
	c.AddHooks(m.Hooks())
	m.Track(c)
	lk, err := c.TryLock(t.Context(), key(t), dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Each renewal's reply comes 250ms late: more than half the interval.
	stall.Set(250 * time.Millisecond)
	eventually(t, 10*time.Second, "a Behind warning", func() bool {
		return gather(t, m).value("dlock_watchdog_behind_total") >= 1
	})
	stall.Set(0)
	if err := lk.Err(); err != nil {
		t.Fatalf("lost while only late: %v", err)
	}
	// Stats and the scrape are read apart; the watchdog may warn between
	// them (at most once a second), so compare until they agree.
	eventually(t, 10*time.Second, "the counters to equal Stats", func() bool {
		st := c.Stats()
		s := gather(t, m)
		return s.value("dlock_watchdog_behind_total") == float64(st.Behind) &&
			s.value("dlock_renew_reports_dropped_total") == float64(st.RenewReportsDropped) &&
			s.value("dlock_pubsub_redials_total") == float64(st.PubSubRedials) &&
			s.value("dlock_handoffs_received_total") == float64(st.Handoffs) &&
			s.value("dlock_refusals_total") == float64(st.Refusals) &&
			s.value("dlock_releases_left_total") == float64(st.ReleasesLeft) &&
			s.value("dlock_releases_resent_total") == float64(st.ReleasesResent)
	})
}

// TestReleasesLeft: an Unlock whose Redis is gone gives up after
// ReleaseTimeout, and once the lock's deadline passes the scrape counts
// the release left to expire.
func TestReleasesLeft(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	c, err := dlock.New(rdb, dlock.Options{ReleaseTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = rdb.Close()
	})
	m := dlockprom.NewCollector(dlockprom.Opts{})
	c.AddHooks(m.Hooks())
	m.Track(c)
	lk, err := c.Lock(t.Context(), key(t), dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Unlock on a dead server = %v, want ErrUnavailable", err)
	}
	eventually(t, 10*time.Second, "dlock_releases_left_total to count the release", func() bool {
		return gather(t, m).value("dlock_releases_left_total") == 1
	})
	if n := c.Stats().ReleasesLeft; n != 1 {
		t.Errorf("Stats.ReleasesLeft = %d, want 1", n)
	}
}

// TestBargingNoHandoff: a barging waiter that gets the key when its holder
// releases it acquired after waiting, but received no FIFO hand-off.
func TestBargingNoHandoff(t *testing.T) {
	ctx := t.Context()
	m, c, _ := newInstrumented(t, dlockprom.Opts{}, dlock.Options{Barging: true})
	k := key(t)
	held, err := c.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	lockc := make(chan *dlock.Lock, 1)
	go func() {
		lk, err := c.Lock(ctx, k)
		if err != nil {
			t.Error(err)
		}
		lockc <- lk
	}()
	eventually(t, 5*time.Second, "a waiter", func() bool { return c.Stats().Waiting == 1 })
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lk := <-lockc
	if lk == nil {
		t.FailNow()
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	s := gather(t, m)
	if got := s.value("dlock_acquired_after_wait_total"); got != 1 {
		t.Errorf("acquired after wait = %v, want 1", got)
	}
	if got, want := s.value("dlock_handoffs_received_total"), float64(c.Stats().Handoffs); got != 0 || want != 0 {
		t.Errorf("handoffs received = %v (Stats.Handoffs %v), want 0: a barging waiter is handed nothing", got, want)
	}
}

// TestLabels checks the label every outcome of every event is counted
// under.
func TestLabels(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "acquired"},
		{&dlock.NotAcquiredError{Key: "k", TTL: time.Second}, "busy"},
		{errors.Join(dlock.ErrContextDone, context.DeadlineExceeded), "timeout"},
		{errors.Join(dlock.ErrContextDone, context.Canceled), "canceled"},
		{fmt.Errorf("%w: %w", dlock.ErrUnavailable, errors.New("i/o timeout")), "error"},
		{dlock.ErrClosed, "error"},
		{dlock.ErrEmptyKey, "error"},
	} {
		m := dlockprom.NewCollector(dlockprom.Opts{})
		m.Hooks().Acquire(bg, dlock.AcquireInfo{Key: "k", Err: tc.err})
		if got := gather(t, m).count("dlock_acquire_duration_seconds", "result", tc.want); got != 1 {
			t.Errorf("acquire error %v: %d under result=%q, want 1", tc.err, got, tc.want)
		}
	}
	for _, tc := range []struct {
		cause error
		want  string
	}{
		{dlock.ErrExpired, "expired"},
		{dlock.ErrTaken, "taken"},
		{errors.Join(dlock.ErrTaken, dlock.ErrWrongType), "taken"},
		{errors.Join(dlock.ErrUnreachable, errors.New("i/o timeout")), "unreachable"},
		{errors.New("new cause"), "other"}, // still counted
	} {
		for _, keyLabel := range []func(string) string{nil, func(string) string { return "k" }} {
			m := dlockprom.NewCollector(dlockprom.Opts{KeyLabel: keyLabel})
			m.Hooks().Lost(bg, dlock.LostInfo{Key: "k", Cause: tc.cause})
			if got := gather(t, m).value("dlock_lost_total", "reason", tc.want); got != 1 {
				t.Errorf("loss cause %v (key label %v): lost{reason=%q} = %v, want 1", tc.cause, keyLabel != nil, tc.want, got)
			}
		}
	}
	lostErr := fmt.Errorf("%w: %w", dlock.ErrLost, dlock.ErrExpired)
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{errors.New("i/o timeout"), "error"},
		{lostErr, "lost"},
	} {
		m := dlockprom.NewCollector(dlockprom.Opts{})
		m.Hooks().Renew(bg, dlock.RenewInfo{Key: "k", Err: tc.err})
		if got := gather(t, m).value("dlock_renewals_total", "result", tc.want); got != 1 {
			t.Errorf("renewal error %v: renewals{result=%q} = %v, want 1", tc.err, tc.want, got)
		}
	}
}

// TestAddHooks: the Collector's hooks, added next to the caller's own,
// count the Client's events, and both run.
func TestAddHooks(t *testing.T) {
	var got []string
	rec := func(name string) dlock.Hooks {
		return dlock.Hooks{
			Acquire: func(_ context.Context, i dlock.AcquireInfo) { got = append(got, name+":acquire") },
			Lost:    func(_ context.Context, i dlock.LostInfo) { got = append(got, name+":lost") },
		}
	}
	m := dlockprom.NewCollector(dlockprom.Opts{})
	c, rdb := newClient(t, srv.Addr(), dlock.Options{Hooks: rec("a")})
	c.AddHooks(m.Hooks())
	c.AddHooks(rec("b"))
	k := key(t)
	lk, err := c.TryLock(t.Context(), k, dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(t.Context(), k)
	if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Unlock of a deleted key: %v", err)
	}
	want := "a:acquire b:acquire a:lost b:lost"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("calls %q, want %q", s, want)
	}
	s := gather(t, m)
	if s.count("dlock_acquire_duration_seconds", "result", "acquired") != 1 || s.value("dlock_lost_total", "reason", "expired") != 1 {
		t.Errorf("the Collector missed the acquire or the loss")
	}
}

// TestConcurrent feeds the collector from many goroutines while it is
// scraped (run with -race).
func TestConcurrent(t *testing.T) {
	ctx := t.Context()
	m, c, _ := newInstrumented(t, dlockprom.Opts{}, dlock.Options{})
	base := key(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = testutil.CollectAndCount(m)
			}
		}
	}()
	const workers, rounds = 8, 50
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				lk, err := c.Lock(ctx, fmt.Sprintf("%s:%d", base, (w+i)%4))
				if err != nil {
					t.Error(err)
					return
				}
				if err := lk.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	s := gather(t, m)
	if got := s.count("dlock_acquire_duration_seconds", "result", "acquired"); got != workers*rounds {
		t.Errorf("acquired: %d, want %d", got, workers*rounds)
	}
	if got := s.count("dlock_hold_duration_seconds"); got != workers*rounds {
		t.Errorf("hold: %d, want %d", got, workers*rounds)
	}
	if got, want := s.value("dlock_acquired_after_wait_total"), float64(c.Stats().Waits); got > want {
		t.Errorf("acquired after wait %v > waits %v", got, want)
	}
}
