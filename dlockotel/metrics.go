package dlockotel

import (
	"context"
	"errors"

	"github.com/dlock-go/dlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Attribute keys.
const (
	attrKey           = attribute.Key("dlock.key")
	attrFence         = attribute.Key("dlock.fence")
	attrMode          = attribute.Key("dlock.acquire.mode")
	attrAcquireResult = attribute.Key("dlock.acquire.result")
	attrWaitDuration  = attribute.Key("dlock.acquire.wait_duration")
	attrAttempts      = attribute.Key("dlock.acquire.attempts")
	attrWaited        = attribute.Key("dlock.acquire.waited")
	attrReleaseResult = attribute.Key("dlock.release.result")
	attrHoldDuration  = attribute.Key("dlock.hold.duration")
	attrLostReason    = attribute.Key("dlock.lost.reason")
	attrRenewalResult = attribute.Key("dlock.renewal.result")
)

// instruments records the metrics. Measurement options are built once, so
// recording allocates nothing.
type instruments struct {
	acquire, wait, hold metric.Float64Histogram
	lostC, renewals     metric.Int64Counter
	handoffs            metric.Int64Counter

	acquireBy map[string][]metric.RecordOption
	lostBy    map[string][]metric.AddOption
	renewBy   map[string][]metric.AddOption
}

func newInstruments(m metric.Meter, cfg config, observe func() (held, waiting int64)) (*instruments, error) {
	var in instruments
	var errs []error
	hist := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	in.acquire = hist("dlock.acquire.duration",
		"Time spent in Lock and TryLock calls, by outcome.", cfg.durBkts)
	in.wait = hist("dlock.wait.duration",
		"Time spent in Lock calls that found the key held and waited, whatever their outcome.", cfg.durBkts)
	in.hold = hist("dlock.hold.duration",
		"Time from acquiring a lock to releasing or losing it.", cfg.holdBkts)
	in.lostC = counter("dlock.lost", "{lock}", "Locks lost while held, by reason.")
	in.renewals = counter("dlock.renewals", "{renewal}", "Lock renewal attempts, by result.")
	in.handoffs = counter("dlock.handoffs", "{lock}", "Locks acquired after waiting for another holder to release them.")

	held, err := m.Int64ObservableUpDownCounter("dlock.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks held now by the tracked clients."))
	errs = append(errs, err)
	waiting, err := m.Int64ObservableUpDownCounter("dlock.waiting", metric.WithUnit("{call}"),
		metric.WithDescription("Lock calls of the tracked clients waiting for a key now."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		h, w := observe()
		o.ObserveInt64(held, h)
		o.ObserveInt64(waiting, w)
		return nil
	}, held, waiting)
	if err != nil {
		return nil, err
	}

	in.acquireBy = make(map[string][]metric.RecordOption)
	for _, r := range []string{resultAcquired, resultBusy, resultTimeout, resultCanceled, resultError} {
		in.acquireBy[r] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrAcquireResult.String(r)))}
	}
	in.lostBy = make(map[string][]metric.AddOption)
	for _, r := range []string{reasonExpired, reasonTaken, reasonUnreachable, reasonOther} {
		in.lostBy[r] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrLostReason.String(r)))}
	}
	in.renewBy = make(map[string][]metric.AddOption)
	for _, r := range []string{renewOK, renewError, renewLost} {
		in.renewBy[r] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrRenewalResult.String(r)))}
	}
	return &in, nil
}

// The hooks carry no context; measurements are recorded without one.
var bg = context.Background()

func (in *instruments) acquired(i dlock.AcquireInfo) {
	secs := i.Wait.Seconds()
	in.acquire.Record(bg, secs, in.acquireBy[acquireResult(i.Err)]...)
	if i.Waited {
		in.wait.Record(bg, secs)
		if i.Err == nil {
			in.handoffs.Add(bg, 1)
		}
	}
}

func (in *instruments) released(i dlock.ReleaseInfo) {
	// A failed release leaves the lock held; one that found it lost was
	// recorded by lost, which the core calls first.
	if i.Err == nil {
		in.hold.Record(bg, i.Held.Seconds())
	}
}

func (in *instruments) lost(i dlock.LostInfo) {
	in.hold.Record(bg, i.Held.Seconds())
	in.lostC.Add(bg, 1, in.lostBy[lostReason(i.Cause)]...)
}

func (in *instruments) renewed(i dlock.RenewInfo) {
	in.renewals.Add(bg, 1, in.renewBy[renewalResult(i.Err)]...)
}
