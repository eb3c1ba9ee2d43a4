// Package dlockotel instruments dlock with OpenTelemetry: spans around lock
// calls, started from the caller's context, and metrics from the Client's
// hooks.
//
// # Setup
//
// A [Telemetry] has two sides, and both are needed for complete spans:
//
//   - its [Telemetry.Hooks], installed in the Client's dlock.Options, see
//     every acquire, release, renewal and loss, record the metrics, and
//     give the spans what only the core knows (attempts, whether the call
//     waited, how long the lock was held) and the lost-lock spans;
//   - its wrappers [Telemetry.Lock], [Telemetry.TryLock], [Telemetry.Unlock]
//     and [Telemetry.Do] start the spans. The core's hooks carry no context,
//     so a span can only be parented to the caller's span by a call that
//     receives the caller's ctx: replace locks.Lock(ctx, key) with
//     tel.Lock(ctx, locks, key), lock.Unlock(ctx) with tel.Unlock(ctx, lock),
//     locks.Do(ctx, key, fn) with tel.Do(ctx, locks, key, fn). The lock
//     returned is the plain *dlock.Lock.
//
// For example:
//
//	tel, err := dlockotel.New(dlockotel.WithTracerProvider(tp), dlockotel.WithMeterProvider(mp))
//	...
//	locks, err := dlock.New(rdb, dlock.Options{Hooks: tel.Hooks()})
//	...
//	tel.Track(locks) // dlock.held and dlock.waiting
//	err = tel.Do(ctx, locks, "nightly-report", func(ctx context.Context) error { ... })
//
// Calls made on the Client directly still feed the metrics and still produce
// a dlock.lost span if their lock is lost, but get no acquire or release
// span. Without the hooks installed, the wrappers still make spans, without
// attempts, waited, hold time and lost-lock spans.
//
// Use one Telemetry per Client: the hooks match their events to the
// wrappers' calls by key (and fence, or the very error value returned), so
// two Clients on different Redis deployments locking equal keys through one
// Telemetry could, in rare interleavings, lend one call's attempts to the
// other's span.
//
// # Spans
//
// All spans are internal spans of the tracer named [ScopeName].
//
//	dlock.acquire  Lock or TryLock: dlock.acquire.mode (lock|try), dlock.acquire.result,
//	               dlock.acquire.wait_duration (s), dlock.acquire.attempts,
//	               dlock.acquire.waited, dlock.fence (when acquired)
//	dlock.release  Unlock: dlock.fence, dlock.release.result (ok|lost|error),
//	               dlock.hold.duration (s)
//	dlock.do       Do: the parent of its dlock.acquire and dlock.release and of
//	               the spans fn makes from its ctx
//	dlock.lost     a lock lost while held: dlock.fence, dlock.lost.reason
//	               (expired|taken|unreachable), dlock.hold.duration (s)
//
// dlock.acquire.result is acquired, busy (TryLock found the key held),
// timeout, canceled or error, as in dlockprom. A span's status is Error
// when its call returned an error, except busy, which is an answer, not a
// failure.
//
// The dlock.lost span is a child of the span that was current in the ctx
// given to Lock, TryLock or Do (for Do: its dlock.do span), or of the
// dlock.acquire span if there was none, and links to the dlock.acquire
// span; a lock taken without the wrappers gets a root dlock.lost span. If
// that caller's span is still recording (typical for Do), it also gets a
// "dlock.lost" event.
//
// No span has the lock key unless [WithKeyAttribute] gives a mapping: keys
// may carry user data.
//
// # Metrics
//
// Recorded from the hooks on the meter named [ScopeName], whatever calls
// the Client:
//
//	dlock.acquire.duration  histogram, s        dlock.acquire.result
//	dlock.wait.duration     histogram, s        Lock calls that found the key held and waited
//	dlock.hold.duration     histogram, s        acquire to release or loss
//	dlock.lost              counter, {lock}     dlock.lost.reason
//	dlock.renewals          counter, {renewal}  dlock.renewal.result (ok|error|lost)
//	dlock.handoffs          counter, {lock}     acquires that had waited
//	dlock.held              up-down counter (observed), {lock}: locks held by tracked Clients
//	dlock.waiting           up-down counter (observed), {call}: Lock calls waiting in tracked Clients
//
// Through the OpenTelemetry Prometheus exporter these become the names
// dlockprom uses (dlock_acquire_duration_seconds, dlock_lost_total, ...).
// Metrics have no key attribute. Without WithMeterProvider the global
// MeterProvider is used, which records nothing until one is set; pass
// noop.NewMeterProvider() to turn the metrics off for good.
package dlockotel

import (
	"context"
	"errors"
	"sync"

	"github.com/dlock-go/dlock"
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

// StatsSource is what dlock.held and dlock.waiting observe. *dlock.Client
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
	corr    correlator

	mu      sync.Mutex
	sources map[*StatsSource]struct{}
}

// New returns a Telemetry. Install its Hooks in the Client's Options, Track
// the Client, and call the Client through its wrappers.
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
	t.corr.init()
	m, err := newInstruments(cfg.mp.Meter(ScopeName), cfg, t.observe)
	if err != nil {
		return nil, err
	}
	t.m = m
	return t, nil
}

// Hooks returns the hooks that feed the Telemetry, for dlock.Options.Hooks.
// To install other hooks as well, combine them with Chain.
func (t *Telemetry) Hooks() dlock.Hooks {
	return dlock.Hooks{
		Acquire: t.onAcquire,
		Release: t.onRelease,
		Renew:   t.onRenew,
		Lost:    t.onLost,
	}
}

// Track adds s (normally the *dlock.Client whose Options carry t's Hooks)
// to the sources dlock.held and dlock.waiting observe; they report the sum
// over all tracked sources. The returned func stops tracking s.
func (t *Telemetry) Track(s StatsSource) (untrack func()) {
	p := &s
	t.mu.Lock()
	t.sources[p] = struct{}{}
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(t.sources, p)
		t.mu.Unlock()
	}
}

// observe sums the tracked sources' gauges.
func (t *Telemetry) observe() (held, waiting int64) {
	t.mu.Lock()
	sources := make([]StatsSource, 0, len(t.sources))
	for p := range t.sources {
		sources = append(sources, *p)
	}
	t.mu.Unlock()
	for _, s := range sources {
		st := s.Stats()
		held += st.Held
		waiting += st.Waiting
	}
	return held, waiting
}

func (t *Telemetry) onAcquire(i dlock.AcquireInfo) {
	t.m.acquired(i)
	t.corr.acquired(i)
}

func (t *Telemetry) onRelease(i dlock.ReleaseInfo) {
	t.m.released(i)
	t.corr.released(i)
}

func (t *Telemetry) onRenew(i dlock.RenewInfo) {
	t.m.renewed(i)
}

func (t *Telemetry) onLost(i dlock.LostInfo) {
	t.m.lost(i)
	t.lostSpan(i, t.corr.lost(i))
}

// Label values, shared with dlockprom.
const (
	resultAcquired = "acquired"
	resultBusy     = "busy"
	resultTimeout  = "timeout"
	resultCanceled = "canceled"
	resultError    = "error"

	reasonExpired     = "expired"
	reasonTaken       = "taken"
	reasonUnreachable = "unreachable"
	reasonOther       = "other"

	renewOK    = "ok"
	renewError = "error"
	renewLost  = "lost"
)

// acquireResult maps the error of a Lock or TryLock call to
// dlock.acquire.result.
func acquireResult(err error) string {
	switch {
	case err == nil:
		return resultAcquired
	case errors.Is(err, dlock.ErrNotAcquired):
		return resultBusy
	case errors.Is(err, dlock.ErrContextDone) && errors.Is(err, context.Canceled):
		return resultCanceled
	case errors.Is(err, dlock.ErrContextDone):
		return resultTimeout
	default:
		return resultError
	}
}

// lostReason maps the cause of a loss to dlock.lost.reason.
func lostReason(cause error) string {
	switch {
	case errors.Is(cause, dlock.ErrTaken):
		return reasonTaken
	case errors.Is(cause, dlock.ErrUnreachable):
		return reasonUnreachable
	case errors.Is(cause, dlock.ErrExpired):
		return reasonExpired
	default:
		return reasonOther
	}
}

// renewalResult maps RenewInfo.Err to dlock.renewal.result; it is also the
// result of a release (ok, lost, error).
func renewalResult(err error) string {
	switch {
	case err == nil:
		return renewOK
	case errors.Is(err, dlock.ErrLost):
		return renewLost
	default:
		return renewError
	}
}
