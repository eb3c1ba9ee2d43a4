// Package dlockprom exports dlock metrics to Prometheus.
//
// A [Collector] is a [prometheus.Collector] fed by two sources:
//
//   - the Client's [dlock.Hooks] (acquire, release, renewal and loss
//     events), which it provides through [Collector.Hooks], for the
//     histograms and counters;
//   - the Client's [dlock.Client.Stats] snapshot, read at scrape time, for
//     the dlock_held and dlock_waiting gauges and the counters of
//     Stats.Behind, RenewReportsDropped, PubSubRedials, Handoffs,
//     Refusals, ReleasesLeft and ReleasesResent ([Collector.Track]).
//
// It registers nothing itself: register it on the registry you serve.
// Install its Hooks on the Client (with AddHooks, or in dlock.Options at
// New), Track the Client, Register:
//
//	m := dlockprom.NewCollector(dlockprom.Opts{})
//	locks.AddHooks(m.Hooks())
//	m.Track(locks)
//	reg.MustRegister(m)
//
// One Collector can serve several Clients (add its Hooks to each and
// Track each): the hook-fed series then cover all of them and the
// Stats-fed ones are sums. To tell Clients apart instead, give each its own
// Collector with distinct Opts.ConstLabels.
//
// # Metrics
//
//	dlock_acquire_duration_seconds     histogram  result  time in Lock/TryLock, per outcome
//	dlock_wait_duration_seconds        histogram          time in calls that found the key held
//	dlock_hold_duration_seconds        histogram          acquire to release or loss
//	dlock_lost_total                   counter    reason  locks lost while held
//	dlock_renewals_total               counter    result  renewal attempts (watchdog and Extend)
//	dlock_acquired_after_wait_total    counter            Lock calls that waited, then acquired
//	dlock_releases_total               counter            locks released by Unlock
//	dlock_held                         gauge              locks held now
//	dlock_waiting                      gauge              Lock calls waiting now
//	dlock_watchdog_behind_total        counter            watchdog Behind warnings
//	dlock_renew_reports_dropped_total  counter            renewals the Renew hook missed
//	dlock_pubsub_redials_total         counter            pub/sub connections replaced
//	dlock_handoffs_received_total      counter            FIFO hand-offs received by queued waiters
//	dlock_refusals_total               counter            calls a Redis node refused before running them, sent again
//	dlock_releases_left_total          counter            locks whose release went unconfirmed, left to expire
//	dlock_releases_resent_total        counter            releases sent again after a new Sentinel master was reached
//
// The labels name the event's [outcome.Outcome] ([outcome.Of] of its
// error). result of dlock_acquire_duration_seconds is one of acquired,
// busy (TryLock found the key held), timeout (the context's deadline
// passed), canceled (the context was cancelled) and error (a Redis error,
// a closed Client, a key that is not a lock, bad input). reason of
// dlock_lost_total is expired, taken or unreachable; result of
// dlock_renewals_total is ok, error (a Redis error: the lock stays held
// until its deadline) or lost.
// Without Opts.KeyLabel, every one of these label values is exported from
// the first scrape, at 0.
//
// The last nine are read from the tracked Clients' Stats at scrape time
// (sums over them); the others are fed by the Hooks. A Client no longer
// tracked keeps adding its last counts to the seven Stats-fed counters, so
// they never go down.
//
// dlock_refusals_total (Stats.Refusals) counts the script calls and
// commands a Redis node refused before running them while a Cluster's
// topology changed (TRYAGAIN, ASK, MOVED, CLUSTERDOWN, LOADING,
// MASTERDOWN): each was sent again while its caller's deadline allowed.
// Clients over the same go-redis client share the count.
//
// dlock_releases_left_total (Stats.ReleasesLeft) counts the locks whose
// release no reply confirmed before their deadline: Unlock (after its
// retries, within dlock.Options.ReleaseTimeout) or Close gave up on an
// unreachable Redis, and the key was left to expire by its TTL, held by
// nobody until then (unless the release ran and only its reply was lost).
// A rise means waiters on those keys waited out a TTL.
//
// dlock_releases_resent_total (Stats.ReleasesResent) counts the releases
// sent again, in the background, after a Client over a go-redis
// FailoverClient (Sentinel) reached a new master: those of the last
// dlock.Options.ReleaseResendWindow, which the old master may have
// accepted and lost. A resend is harmless; a rise follows a failover. It
// stays 0 for a plain Client, Cluster or Ring.
//
// # Hand-offs
//
// dlock_acquired_after_wait_total counts the Lock calls that found the key
// held, waited, and acquired it, however the key came free: a FIFO
// hand-off, a release a barging waiter won, or the holder's TTL running
// out.
//
// dlock_handoffs_received_total (Stats.Handoffs) counts the FIFO hand-offs
// themselves: the times a queued waiter of a tracked Client was woken to
// take the lock a release handed it. The Client counts it when the waiter
// wakes, before it confirms: a waiter that comes too late to confirm its
// hand-off goes back to the queue and may receive another. The wake-up
// every queued waiter gets when the Client's pub/sub connection drops or is
// replaced is no hand-off and does not count. With Options.Barging nothing
// is handed off and it stays 0.
//
// # Key label
//
// No metric has a lock-name label by default: lock keys are an unbounded
// set, which Prometheus cannot store. Opts.KeyLabel opts in to a "key" label
// on every hook-fed metric, with the value KeyLabel returns for the key; it
// must map keys to a small, fixed set (for example the part before the first
// ':'). The series read from Stats never have it.
//
// # Cost
//
// The hooks run in the goroutine that did the work (for the watchdog's
// renewals and losses, on its reporting goroutines). Without
// KeyLabel they make no allocation and take no lock: each event is one or
// two atomic histogram or counter updates on series resolved in
// NewCollector. See the package benchmark for the measured overhead.
package dlockprom

import (
	"context"
	"strings"
	"sync"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/outcome"
	"github.com/prometheus/client_golang/prometheus"
)

// Label values of the result label of dlock_acquire_duration_seconds.
const (
	ResultAcquired = "acquired"
	ResultBusy     = "busy"
	ResultTimeout  = "timeout"
	ResultCanceled = "canceled"
	ResultError    = "error"
)

// Label values of the reason label of dlock_lost_total.
const (
	ReasonExpired     = "expired"
	ReasonTaken       = "taken"
	ReasonUnreachable = "unreachable"
)

// Label values of the result label of dlock_renewals_total.
const (
	RenewalOK    = "ok"
	RenewalError = "error"
	RenewalLost  = "lost"
)

// DefaultDurationBuckets are the buckets of the acquire and wait histograms,
// in seconds: from an uncontended acquire on a local network (well under a
// millisecond) to a five-minute wait.
var DefaultDurationBuckets = []float64{
	.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5,
	1, 2.5, 5, 10, 30, 60, 120, 300,
}

// DefaultHoldBuckets are the buckets of the hold histogram, in seconds: from
// a millisecond to an hour.
var DefaultHoldBuckets = []float64{
	.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600,
}

// Opts configures a Collector. The zero value is valid.
type Opts struct {
	// ConstLabels are added to every metric, for example to tell apart the
	// Collectors of two Clients registered on one registry. Default: none.
	ConstLabels prometheus.Labels

	// KeyLabel, if set, adds a "key" label to every metric fed by the hooks
	// (not to those read from Stats), whose value is KeyLabel(key).
	// It must return few distinct values: each is a new series of every
	// such metric (and each histogram series is one per bucket). It is
	// called once per event, in the hook, so it must be fast. Default: nil,
	// no key label.
	KeyLabel func(key string) string

	// DurationBuckets are the buckets of dlock_acquire_duration_seconds and
	// dlock_wait_duration_seconds. Default: DefaultDurationBuckets.
	DurationBuckets []float64

	// HoldBuckets are the buckets of dlock_hold_duration_seconds.
	// Default: DefaultHoldBuckets.
	HoldBuckets []float64
}

// StatsSource is what the gauges read at scrape time. *dlock.Client
// implements it.
type StatsSource interface {
	Stats() dlock.Stats
}

// Collector collects dlock metrics. Create it with NewCollector. It is safe
// for concurrent use by multiple goroutines.
type Collector struct {
	keyLabel func(string) string

	acquire   *prometheus.HistogramVec
	wait      *prometheus.HistogramVec
	hold      *prometheus.HistogramVec
	lost      *prometheus.CounterVec
	renewals  *prometheus.CounterVec
	afterWait *prometheus.CounterVec
	releases  *prometheus.CounterVec

	heldDesc, waitingDesc                *prometheus.Desc
	behindDesc, droppedDesc, redialsDesc *prometheus.Desc
	handoffsRecvDesc, refusalsDesc       *prometheus.Desc
	releasesLeftDesc, releasesResentDesc *prometheus.Desc

	// Series resolved up front, used when keyLabel is nil; indexed like
	// acquireResults, lostReasons and renewalResults.
	acquireBy [len(acquireResults)]prometheus.Observer
	lostBy    [len(lostReasons)]prometheus.Counter
	renewBy   [len(renewalResults)]prometheus.Counter
	waitObs   prometheus.Observer
	holdObs   prometheus.Observer
	waitedC   prometheus.Counter
	releaseC  prometheus.Counter

	mu      sync.Mutex
	sources map[*StatsSource]struct{} // pointer keys: sources need not be comparable
	retired statsCounters             // the Stats-fed counters of untracked sources, at Untrack
}

// statsCounters are the counters read from Stats.
type statsCounters struct {
	behind, dropped, redials, handoffs, refusals uint64
	releasesLeft, releasesResent                 uint64
}

func (a *statsCounters) add(s dlock.Stats) {
	a.behind += s.Behind
	a.dropped += s.RenewReportsDropped
	a.redials += s.PubSubRedials
	a.handoffs += s.Handoffs
	a.refusals += s.Refusals
	a.releasesLeft += s.ReleasesLeft
	a.releasesResent += s.ReleasesResent
}

// NewCollector returns a Collector. Add its Hooks to the Client, Track the
// Client, and register the Collector.
func NewCollector(opts Opts) *Collector {
	durBuckets := opts.DurationBuckets
	if len(durBuckets) == 0 {
		durBuckets = DefaultDurationBuckets
	}
	holdBuckets := opts.HoldBuckets
	if len(holdBuckets) == 0 {
		holdBuckets = DefaultHoldBuckets
	}
	var key []string
	if opts.KeyLabel != nil {
		key = []string{"key"}
	}
	labels := func(l ...string) []string { return append(l, key...) }

	c := &Collector{
		keyLabel: opts.KeyLabel,
		acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "dlock_acquire_duration_seconds",
			Help:        "Time spent in Lock and TryLock calls, by outcome (acquired, busy, timeout, canceled, error).",
			ConstLabels: opts.ConstLabels,
			Buckets:     durBuckets,
		}, labels("result")),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "dlock_wait_duration_seconds",
			Help:        "Time spent in Lock calls that found the key held and waited, whatever their outcome.",
			ConstLabels: opts.ConstLabels,
			Buckets:     durBuckets,
		}, labels()),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "dlock_hold_duration_seconds",
			Help:        "Time from acquiring a lock to releasing or losing it.",
			ConstLabels: opts.ConstLabels,
			Buckets:     holdBuckets,
		}, labels()),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "dlock_lost_total",
			Help:        "Locks lost while held, by reason (expired, taken, unreachable).",
			ConstLabels: opts.ConstLabels,
		}, labels("reason")),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "dlock_renewals_total",
			Help:        "Lock renewal attempts, by result (ok, error, lost).",
			ConstLabels: opts.ConstLabels,
		}, labels("result")),
		afterWait: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "dlock_acquired_after_wait_total",
			Help:        "Lock calls that found the key held, waited, and acquired it (by a hand-off, a release or an expiry).",
			ConstLabels: opts.ConstLabels,
		}, labels()),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "dlock_releases_total",
			Help:        "Locks released by Unlock (not lost).",
			ConstLabels: opts.ConstLabels,
		}, labels()),
		heldDesc: prometheus.NewDesc("dlock_held",
			"Locks held now by the tracked clients.", nil, opts.ConstLabels),
		waitingDesc: prometheus.NewDesc("dlock_waiting",
			"Lock calls of the tracked clients waiting for a key now.", nil, opts.ConstLabels),
		behindDesc: prometheus.NewDesc("dlock_watchdog_behind_total",
			"Warnings that the watchdog of a tracked client fell behind its renewals (Hooks.Behind).", nil, opts.ConstLabels),
		droppedDesc: prometheus.NewDesc("dlock_renew_reports_dropped_total",
			"Watchdog renewals of the tracked clients not reported to the Renew hook, which fell too far behind.", nil, opts.ConstLabels),
		redialsDesc: prometheus.NewDesc("dlock_pubsub_redials_total",
			"Pub/sub connections of the tracked clients replaced because they missed their liveness probe.", nil, opts.ConstLabels),
		handoffsRecvDesc: prometheus.NewDesc("dlock_handoffs_received_total",
			"FIFO hand-offs received by queued Lock calls of the tracked clients (Stats.Handoffs).", nil, opts.ConstLabels),
		refusalsDesc: prometheus.NewDesc("dlock_refusals_total",
			"Calls a Redis node refused before running them during a Cluster topology change (TRYAGAIN, ASK, MOVED...), sent again (Stats.Refusals).", nil, opts.ConstLabels),
		releasesLeftDesc: prometheus.NewDesc("dlock_releases_left_total",
			"Locks of the tracked clients whose release no reply confirmed before their deadline, left to expire by their TTL (Stats.ReleasesLeft).", nil, opts.ConstLabels),
		releasesResentDesc: prometheus.NewDesc("dlock_releases_resent_total",
			"Releases of the tracked clients sent again after the client reached a new Sentinel master, which may have lost them (Stats.ReleasesResent).", nil, opts.ConstLabels),
		sources: make(map[*StatsSource]struct{}),
	}
	if c.keyLabel == nil {
		// Resolve every series now: the hooks then never look one up, and
		// every label value is exported at 0 from the first scrape.
		for i, r := range acquireResults {
			c.acquireBy[i] = c.acquire.WithLabelValues(r)
		}
		for i, r := range lostReasons {
			c.lostBy[i] = c.lost.WithLabelValues(r)
		}
		for i, r := range renewalResults {
			c.renewBy[i] = c.renewals.WithLabelValues(r)
		}
		c.waitObs = c.wait.WithLabelValues()
		c.holdObs = c.hold.WithLabelValues()
		c.waitedC = c.afterWait.WithLabelValues()
		c.releaseC = c.releases.WithLabelValues()
	}
	return c
}

// Hooks returns the hooks that feed the Collector, for Client.AddHooks
// (or dlock.Options.Hooks).
func (c *Collector) Hooks() dlock.Hooks {
	return dlock.Hooks{
		Acquire: c.onAcquire,
		Release: c.onRelease,
		Renew:   c.onRenew,
		Lost:    c.onLost,
	}
}

// Track adds s (normally the *dlock.Client that runs c's Hooks) to the
// sources of the Stats-fed series (dlock_held, dlock_waiting and the
// counters of Stats.Behind, RenewReportsDropped, PubSubRedials,
// Handoffs, Refusals, ReleasesLeft and ReleasesResent), which report the
// sum over all tracked sources. The returned func stops tracking s; call
// it when the Client is closed for good if the Collector outlives it. The
// counters keep the counts s had then.
func (c *Collector) Track(s StatsSource) (untrack func()) {
	p := &s
	c.mu.Lock()
	c.sources[p] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.sources[p]; ok {
			delete(c.sources, p)
			c.retired.add(s.Stats())
		}
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.acquire.Describe(ch)
	c.wait.Describe(ch)
	c.hold.Describe(ch)
	c.lost.Describe(ch)
	c.renewals.Describe(ch)
	c.afterWait.Describe(ch)
	c.releases.Describe(ch)
	ch <- c.heldDesc
	ch <- c.waitingDesc
	ch <- c.behindDesc
	ch <- c.droppedDesc
	ch <- c.redialsDesc
	ch <- c.handoffsRecvDesc
	ch <- c.refusalsDesc
	ch <- c.releasesLeftDesc
	ch <- c.releasesResentDesc
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.acquire.Collect(ch)
	c.wait.Collect(ch)
	c.hold.Collect(ch)
	c.lost.Collect(ch)
	c.renewals.Collect(ch)
	c.afterWait.Collect(ch)
	c.releases.Collect(ch)

	c.mu.Lock()
	sources := make([]StatsSource, 0, len(c.sources))
	for p := range c.sources {
		sources = append(sources, *p)
	}
	counts := c.retired
	c.mu.Unlock()
	var held, waiting int64
	for _, s := range sources {
		st := s.Stats()
		held += st.Held
		waiting += st.Waiting
		counts.add(st)
	}
	ch <- prometheus.MustNewConstMetric(c.heldDesc, prometheus.GaugeValue, float64(held))
	ch <- prometheus.MustNewConstMetric(c.waitingDesc, prometheus.GaugeValue, float64(waiting))
	ch <- prometheus.MustNewConstMetric(c.behindDesc, prometheus.CounterValue, float64(counts.behind))
	ch <- prometheus.MustNewConstMetric(c.droppedDesc, prometheus.CounterValue, float64(counts.dropped))
	ch <- prometheus.MustNewConstMetric(c.redialsDesc, prometheus.CounterValue, float64(counts.redials))
	ch <- prometheus.MustNewConstMetric(c.handoffsRecvDesc, prometheus.CounterValue, float64(counts.handoffs))
	ch <- prometheus.MustNewConstMetric(c.refusalsDesc, prometheus.CounterValue, float64(counts.refusals))
	ch <- prometheus.MustNewConstMetric(c.releasesLeftDesc, prometheus.CounterValue, float64(counts.releasesLeft))
	ch <- prometheus.MustNewConstMetric(c.releasesResentDesc, prometheus.CounterValue, float64(counts.releasesResent))
}

var _ prometheus.Collector = (*Collector)(nil)

func (c *Collector) onAcquire(_ context.Context, i dlock.AcquireInfo) {
	result := acquireResult[outcome.Of(i.Err)]
	secs := i.Wait.Seconds()
	if c.keyLabel == nil {
		c.acquireBy[result].Observe(secs)
		if i.Waited {
			c.waitObs.Observe(secs)
			if i.Err == nil {
				c.waitedC.Inc()
			}
		}
		return
	}
	k := c.key(i.Key)
	observe(c.acquire, secs, acquireResults[result], k)
	if i.Waited {
		observe(c.wait, secs, k)
		if i.Err == nil {
			inc(c.afterWait, k)
		}
	}
}

func (c *Collector) onRelease(_ context.Context, i dlock.ReleaseInfo) {
	// A release that failed on a Redis error leaves the lock held (the
	// caller may retry); one that found the lock lost was already counted
	// by onLost, which the core calls first.
	if i.Err != nil {
		return
	}
	c.observeHold(i.Key, i.Held.Seconds())
	if c.keyLabel == nil {
		c.releaseC.Inc()
		return
	}
	inc(c.releases, c.key(i.Key))
}

func (c *Collector) onLost(_ context.Context, i dlock.LostInfo) {
	reason := lostReason[outcome.Of(i.Cause)]
	c.observeHold(i.Key, i.Held.Seconds())
	switch {
	case c.keyLabel == nil && reason >= 0:
		c.lostBy[reason].Inc()
	case c.keyLabel == nil:
		inc(c.lost, reasonOther)
	default:
		r := reasonOther
		if reason >= 0 {
			r = lostReasons[reason]
		}
		inc(c.lost, r, c.key(i.Key))
	}
}

func (c *Collector) onRenew(_ context.Context, i dlock.RenewInfo) {
	result := renewalResult[outcome.Of(i.Err)]
	if c.keyLabel == nil {
		c.renewBy[result].Inc()
		return
	}
	inc(c.renewals, renewalResults[result], c.key(i.Key))
}

func (c *Collector) observeHold(key string, secs float64) {
	if c.keyLabel == nil {
		c.holdObs.Observe(secs)
		return
	}
	observe(c.hold, secs, c.key(key))
}

// key returns the key label value for key: KeyLabel's, made valid UTF-8
// (client_golang rejects anything else).
func (c *Collector) key(key string) string {
	return strings.ToValidUTF8(c.keyLabel(key), "\uFFFD")
}

// observe and inc never panic: a hook must not take the caller down.
func observe(v *prometheus.HistogramVec, secs float64, lvs ...string) {
	if o, err := v.GetMetricWithLabelValues(lvs...); err == nil {
		o.Observe(secs)
	}
}

func inc(v *prometheus.CounterVec, lvs ...string) {
	if ctr, err := v.GetMetricWithLabelValues(lvs...); err == nil {
		ctr.Inc()
	}
}

// The label values, indexed by the acquireResult, lostReason and
// renewalResult of an event's outcome.Outcome.
var (
	acquireResults = [...]string{ResultAcquired, ResultBusy, ResultTimeout, ResultCanceled, ResultError}
	lostReasons    = [...]string{ReasonExpired, ReasonTaken, ReasonUnreachable}
	renewalResults = [...]string{RenewalOK, RenewalError, RenewalLost}
)

// reasonOther is the reason of a loss cause this package does not know.
const reasonOther = "other"

var (
	acquireResult = [outcome.Count]int{
		outcome.OK: 0, outcome.NotAcquired: 1, outcome.Timeout: 2, outcome.Canceled: 3,
		outcome.Expired: 4, outcome.Taken: 4, outcome.Unreachable: 4, outcome.Error: 4,
	}
	lostReason = [outcome.Count]int{ // -1: other
		outcome.OK: -1, outcome.NotAcquired: -1, outcome.Timeout: -1, outcome.Canceled: -1,
		outcome.Expired: 0, outcome.Taken: 1, outcome.Unreachable: 2, outcome.Error: -1,
	}
	renewalResult = [outcome.Count]int{
		outcome.OK: 0, outcome.NotAcquired: 1, outcome.Timeout: 1, outcome.Canceled: 1,
		outcome.Expired: 2, outcome.Taken: 2, outcome.Unreachable: 2, outcome.Error: 1,
	}
)
