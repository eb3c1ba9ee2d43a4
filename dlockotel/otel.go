// Package dlockotel instruments dlock with OpenTelemetry: spans and
// metrics from the Client's hooks, which get the context of the call that
// caused each event, so the spans are children of the caller's span, and
// metrics read from the Client's Stats.
//
// # Setup
//
// Add a [Telemetry]'s [Telemetry.Hooks] to the Client (or give them to
// dlock.New in dlock.Options.Hooks) and Track the Client; then call the
// Client as usual, with a ctx that carries your span:
//
//	tel, err := dlockotel.New(dlockotel.WithTracerProvider(tp), dlockotel.WithMeterProvider(mp))
//	...
//	locks.AddHooks(tel.Hooks())
//	tel.Track(locks) // dlock.held, dlock.waiting and the counters read from Stats
//	lock, err := locks.Lock(ctx, "nightly-report")
//
// [Telemetry.Do] is Client.Do inside a dlock.do span, the parent of
// everything the call does (fn's spans included).
//
// # Spans
//
// All spans are internal spans of the tracer named [ScopeName], made by
// the hooks when the call ends (with its start and end times):
//
//	dlock.acquire  every Lock or TryLock: dlock.acquire.mode (lock|try), dlock.acquire.result,
//	               dlock.acquire.wait_duration (s), dlock.acquire.attempts,
//	               dlock.acquire.waited, dlock.fence (when acquired)
//	dlock.release  every Unlock: dlock.fence, dlock.release.result (ok|lost|error),
//	               dlock.hold.duration (s, when released)
//	dlock.do       Telemetry.Do: the parent of its dlock.acquire and dlock.release and of
//	               the spans fn makes from its ctx
//	dlock.lost     a lock lost while held: dlock.fence, dlock.lost.reason
//	               (expired|taken|unreachable), dlock.hold.duration (s)
//
// Each is a child of the span current in the ctx its hook gets (see
// dlock.Hooks): for acquire and release, the ctx given to the call; for
// dlock.lost, the ctx of the Unlock or Extend that found the loss, or else
// the ctx the lock was acquired with (for Do: the dlock.do span). A call
// whose ctx carries no span gets no acquire or release span (untraced
// calls cost no span); a lost lock always gets its dlock.lost span, a root
// span if its ctx carries none.
//
// dlock.acquire.result is acquired, busy (TryLock found the key held),
// timeout, canceled or error, as in dlockprom. A span's status is Error
// when its call returned an error, except busy, which is an answer, not a
// failure. If the span the lost lock's ctx carries is still recording
// (typical for Do), it also gets a "dlock.lost" event.
//
// No span has the lock key unless [WithKeyAttribute] gives a mapping: keys
// may carry user data.
//
// # Metrics
//
// Recorded on the meter named [ScopeName]: from the hooks, with the
// hook's ctx, or read from the tracked Clients' Stats when the metrics are
// collected:
//
//	dlock.acquire.duration       histogram, s        dlock.acquire.result
//	dlock.wait.duration          histogram, s        Lock calls that found the key held and waited
//	dlock.hold.duration          histogram, s        acquire to release or loss
//	dlock.lost                   counter, {lock}     dlock.lost.reason
//	dlock.renewals               counter, {renewal}  dlock.renewal.result (ok|error|lost)
//	dlock.acquired_after_wait    counter, {lock}     Lock calls that waited, then acquired
//	dlock.releases               counter, {lock}     locks released by Unlock (not lost)
//	dlock.held                   up-down counter (observed), {lock}: locks held by tracked Clients
//	dlock.waiting                up-down counter (observed), {call}: Lock calls waiting in tracked Clients
//	dlock.watchdog.behind        counter (observed), {warning}: watchdog Behind warnings (Stats.Behind)
//	dlock.renew_reports.dropped  counter (observed), {renewal}: renewals the Renew hook missed (Stats.RenewReportsDropped)
//	dlock.pubsub.redials         counter (observed), {connection}: pub/sub connections replaced (Stats.PubSubRedials)
//	dlock.handoffs_received      counter (observed), {handoff}: FIFO hand-offs received by queued waiters (Stats.Handoffs)
//	dlock.refusals               counter (observed), {call}: calls a Redis node refused before running them, sent again (Stats.Refusals)
//	dlock.releases_left          counter (observed), {lock}: locks whose release went unconfirmed, left to expire (Stats.ReleasesLeft)
//	dlock.releases_resent        counter (observed), {release}: releases sent again after a new Sentinel master was reached (Stats.ReleasesResent)
//
// The observed ones are read from the Clients given to [Telemetry.Track]
// (sums over them); the others are recorded by the Hooks, for every
// Client they are installed on. A Client no longer tracked keeps adding
// its last counts to the observed counters, so they never go down.
//
// dlock.acquired_after_wait counts the Lock calls that found the key held,
// waited, and acquired it, however the key came free: a FIFO hand-off, a
// release a barging waiter won, or the holder's TTL running out.
// dlock.handoffs_received counts the FIFO
// hand-offs themselves (Stats.Handoffs): the times a queued waiter was
// woken to take the lock a release handed it, counted when it wakes, so a
// waiter that comes too late to confirm its hand-off and receives another
// counts twice; the wake-up a dropped or replaced pub/sub connection gives
// every queued waiter does not count. With dlock.Options.Barging it stays 0.
//
// dlock.refusals (Stats.Refusals) counts the script calls and commands a
// Redis node refused before running them while a Cluster's topology
// changed (TRYAGAIN, ASK, MOVED, CLUSTERDOWN, LOADING, MASTERDOWN): each
// was sent again while its caller's deadline allowed. Clients over the
// same go-redis client share the count.
//
// dlock.releases_left (Stats.ReleasesLeft) counts the locks whose release
// no reply confirmed before their deadline: Unlock (after its retries,
// within dlock.Options.ReleaseTimeout) or Close gave up on an unreachable
// Redis, and the key was left to expire by its TTL, held by nobody until
// then (unless the release ran and only its reply was lost). A rise means
// waiters on those keys waited out a TTL.
//
// dlock.releases_resent (Stats.ReleasesResent) counts the releases sent
// again, in the background, after a Client over a go-redis FailoverClient
// (Sentinel) reached a new master: those of the last
// dlock.Options.ReleaseResendWindow, which the old master may have
// accepted and lost. A resend is harmless; a rise follows a failover. It
// stays 0 for a plain Client, Cluster or Ring.
//
// Through the OpenTelemetry Prometheus exporter these become the names
// dlockprom uses (dlock_acquire_duration_seconds, dlock_lost_total,
// dlock_watchdog_behind_total, ...). Metrics have no key attribute.
// Without WithMeterProvider the global MeterProvider is used, which
// records nothing until one is set; pass noop.NewMeterProvider() to turn
// the metrics off for good.
package dlockotel

import (
	"context"
	"sync"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/outcome"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope (tracer and meter) name.
const ScopeName = "github.com/dlock-go/dlock/dlockotel"

// Option configures New.
type Option func(*config)

type config struct {
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	keyAttr  func(string) string
	durBkts  []float64
	holdBkts []float64
}

// WithTracerProvider sets the TracerProvider spans are made with.
// Default: the global one, otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets the MeterProvider metrics are recorded with.
// Default: the global one, otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithKeyAttribute adds a dlock.key attribute to every span, with the value
// f returns for the lock key: the key itself (func(k string) string {
// return k }), a redacted form, or a category. Default: no key attribute.
func WithKeyAttribute(f func(key string) string) Option {
	return func(c *config) { c.keyAttr = f }
}

// WithDurationBuckets sets the explicit bucket boundaries, in seconds, of
// dlock.acquire.duration and dlock.wait.duration. Default:
// DefaultDurationBuckets.
func WithDurationBuckets(b ...float64) Option {
	return func(c *config) { c.durBkts = b }
}

// WithHoldBuckets sets the explicit bucket boundaries, in seconds, of
// dlock.hold.duration. Default: DefaultHoldBuckets.
func WithHoldBuckets(b ...float64) Option {
	return func(c *config) { c.holdBkts = b }
}

// DefaultDurationBuckets are the default boundaries of the acquire and wait
// histograms, in seconds (the same as dlockprom's).
var DefaultDurationBuckets = []float64{
	.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5,
	1, 2.5, 5, 10, 30, 60, 120, 300,
}

// DefaultHoldBuckets are the default boundaries of the hold histogram, in
// seconds (the same as dlockprom's).
var DefaultHoldBuckets = []float64{
	.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600,
}

// StatsSource is what the observable instruments (dlock.held,
// dlock.waiting and the counters read from Stats) observe. *dlock.Client
// implements it.
type StatsSource interface {
	Stats() dlock.Stats
}

// Telemetry makes spans and metrics for dlock. Create it with New. It is
// safe for concurrent use by multiple goroutines.
type Telemetry struct {
	tracer  trace.Tracer
	keyAttr func(string) string
	m       *instruments

	mu      sync.Mutex
	sources map[*StatsSource]struct{}
	retired statsCounts // the counters of untracked sources, at untrack
}

// statsCounts are the Stats counters the observable counters report.
type statsCounts struct {
	behind, dropped, redials, handoffs, refusals uint64
	releasesLeft, releasesResent                 uint64
}

func (a *statsCounts) add(s dlock.Stats) {
	a.behind += s.Behind
	a.dropped += s.RenewReportsDropped
	a.redials += s.PubSubRedials
	a.handoffs += s.Handoffs
	a.refusals += s.Refusals
	a.releasesLeft += s.ReleasesLeft
	a.releasesResent += s.ReleasesResent
}

// observation is what the observable instruments report: the gauges
// summed over the tracked sources, the counters over the tracked sources
// and the last counts of the untracked ones.
type observation struct {
	held, waiting int64
	statsCounts
}

// New returns a Telemetry. Add its Hooks to the Client and Track the
// Client.
func New(opts ...Option) (*Telemetry, error) {
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	if len(cfg.durBkts) == 0 {
		cfg.durBkts = DefaultDurationBuckets
	}
	if len(cfg.holdBkts) == 0 {
		cfg.holdBkts = DefaultHoldBuckets
	}
	t := &Telemetry{
		tracer:  cfg.tp.Tracer(ScopeName),
		keyAttr: cfg.keyAttr,
		sources: make(map[*StatsSource]struct{}),
	}
	m, err := newInstruments(cfg.mp.Meter(ScopeName), cfg, t.observe)
	if err != nil {
		return nil, err
	}
	t.m = m
	return t, nil
}

// Hooks returns the hooks that make the Telemetry's spans and metrics, for
// Client.AddHooks (or dlock.Options.Hooks).
func (t *Telemetry) Hooks() dlock.Hooks {
	return dlock.Hooks{
		Acquire: t.onAcquire,
		Release: t.onRelease,
		Renew:   t.onRenew,
		Lost:    t.onLost,
	}
}

// Track adds s (normally the *dlock.Client that runs t's Hooks) to the
// sources the observable instruments read (dlock.held, dlock.waiting and
// the counters of Stats.Behind, RenewReportsDropped, PubSubRedials,
// Handoffs, Refusals, ReleasesLeft and ReleasesResent); they report the
// sum over all tracked sources. The returned func stops tracking s; call
// it when the Client is closed for good if the Telemetry outlives it. The
// counters keep the counts s had then, so they never go down.
func (t *Telemetry) Track(s StatsSource) (untrack func()) {
	p := &s
	t.mu.Lock()
	t.sources[p] = struct{}{}
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if _, ok := t.sources[p]; ok {
			delete(t.sources, p)
			t.retired.add(s.Stats())
		}
	}
}

// observe reads the tracked sources' Stats.
func (t *Telemetry) observe() observation {
	t.mu.Lock()
	sources := make([]StatsSource, 0, len(t.sources))
	for p := range t.sources {
		sources = append(sources, *p)
	}
	o := observation{statsCounts: t.retired}
	t.mu.Unlock()
	for _, s := range sources {
		st := s.Stats()
		o.held += st.Held
		o.waiting += st.Waiting
		o.add(st)
	}
	return o
}

func (t *Telemetry) onAcquire(ctx context.Context, i dlock.AcquireInfo) {
	o := outcome.Of(i.Err)
	t.m.acquired(ctx, i, o)
	t.acquireSpan(ctx, i, o)
}

func (t *Telemetry) onRelease(ctx context.Context, i dlock.ReleaseInfo) {
	t.m.released(ctx, i)
	t.releaseSpan(ctx, i, outcome.Of(i.Err))
}

func (t *Telemetry) onRenew(ctx context.Context, i dlock.RenewInfo) {
	t.m.renewed(ctx, i, outcome.Of(i.Err))
}

func (t *Telemetry) onLost(ctx context.Context, i dlock.LostInfo) {
	o := outcome.Of(i.Cause)
	t.m.lost(ctx, i, o)
	t.lostSpan(ctx, i, o)
}
