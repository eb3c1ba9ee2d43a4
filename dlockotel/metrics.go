package dlockotel

import (
	"context"
	"errors"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/outcome"
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
	afterWait           metric.Int64Counter
	releases            metric.Int64Counter

	// Measurement options of each attribute value, indexed like
	// acquireResults, lostReasons and renewalResults.
	acquireBy [len(acquireResults)][]metric.RecordOption
	lostBy    [len(lostReasons)][]metric.AddOption
	renewBy   [len(renewalResults)][]metric.AddOption
}

func newInstruments(m metric.Meter, cfg config, observe func() observation) (*instruments, error) {
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
	in.afterWait = counter("dlock.acquired_after_wait", "{lock}",
		"Lock calls that found the key held, waited, and acquired it (by a hand-off, a release or an expiry).")
	in.releases = counter("dlock.releases", "{lock}", "Locks released by Unlock (not lost).")

	var observed []metric.Observable
	upDown := func(name, unit, desc string) metric.Int64ObservableUpDownCounter {
		c, err := m.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		observed = append(observed, c)
		return c
	}
	observable := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		observed = append(observed, c)
		return c
	}
	held := upDown("dlock.held", "{lock}", "Locks held now by the tracked clients.")
	waiting := upDown("dlock.waiting", "{call}", "Lock calls of the tracked clients waiting for a key now.")
	behind := observable("dlock.watchdog.behind", "{warning}",
		"Warnings that the watchdog of a tracked client fell behind its renewals (Hooks.Behind).")
	dropped := observable("dlock.renew_reports.dropped", "{renewal}",
		"Watchdog renewals of the tracked clients not reported to the Renew hook, which fell too far behind.")
	redials := observable("dlock.pubsub.redials", "{connection}",
		"Pub/sub connections of the tracked clients replaced because they missed their liveness probe.")
	handoffs := observable("dlock.handoffs_received", "{handoff}",
		"FIFO hand-offs received by queued Lock calls of the tracked clients (Stats.Handoffs).")
	refusals := observable("dlock.refusals", "{call}",
		"Calls a Redis node refused before running them during a Cluster topology change (TRYAGAIN, ASK, MOVED...), sent again (Stats.Refusals).")
	releasesLeft := observable("dlock.releases_left", "{lock}",
		"Locks of the tracked clients whose release no reply confirmed before their deadline, left to expire by their TTL (Stats.ReleasesLeft).")
	releasesResent := observable("dlock.releases_resent", "{release}",
		"Releases of the tracked clients sent again after the client reached a new Sentinel master, which may have lost them (Stats.ReleasesResent).")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v := observe()
		o.ObserveInt64(held, v.held)
		o.ObserveInt64(waiting, v.waiting)
		o.ObserveInt64(behind, int64(v.behind))
		o.ObserveInt64(dropped, int64(v.dropped))
		o.ObserveInt64(redials, int64(v.redials))
		o.ObserveInt64(handoffs, int64(v.handoffs))
		o.ObserveInt64(refusals, int64(v.refusals))
		o.ObserveInt64(releasesLeft, int64(v.releasesLeft))
		o.ObserveInt64(releasesResent, int64(v.releasesResent))
		return nil
	}, observed...)
	if err != nil {
		return nil, err
	}

	for i, r := range acquireResults {
		in.acquireBy[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrAcquireResult.String(r)))}
	}
	for i, r := range lostReasons {
		in.lostBy[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrLostReason.String(r)))}
	}
	for i, r := range renewalResults {
		in.renewBy[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrRenewalResult.String(r)))}
	}
	return &in, nil
}

// Each measurement is recorded with the hook's ctx.

func (in *instruments) acquired(ctx context.Context, i dlock.AcquireInfo, o outcome.Outcome) {
	secs := i.Wait.Seconds()
	in.acquire.Record(ctx, secs, in.acquireBy[acquireResult[o]]...)
	if i.Waited {
		in.wait.Record(ctx, secs)
		if i.Err == nil {
			in.afterWait.Add(ctx, 1)
		}
	}
}

func (in *instruments) released(ctx context.Context, i dlock.ReleaseInfo) {
	// A failed release leaves the lock held; one that found it lost was
	// recorded by lost, which the core calls first.
	if i.Err == nil {
		in.hold.Record(ctx, i.Held.Seconds())
		in.releases.Add(ctx, 1)
	}
}

func (in *instruments) lost(ctx context.Context, i dlock.LostInfo, o outcome.Outcome) {
	in.hold.Record(ctx, i.Held.Seconds())
	in.lostC.Add(ctx, 1, in.lostBy[lostReason[o]]...)
}

func (in *instruments) renewed(ctx context.Context, i dlock.RenewInfo, o outcome.Outcome) {
	in.renewals.Add(ctx, 1, in.renewBy[renewalResult[o]]...)
}

// The attribute values, indexed by the acquireResult, lostReason and
// renewalResult of an event's outcome.Outcome (the same as dlockprom's label
// values).
var (
	acquireResults = [...]string{"acquired", "busy", "timeout", "canceled", "error"}
	lostReasons    = [...]string{"expired", "taken", "unreachable", "other"}
	renewalResults = [...]string{"ok", "error", "lost"} // also the result of a release
)

var (
	acquireResult = [outcome.Count]int{
		outcome.OK: 0, outcome.NotAcquired: 1, outcome.Timeout: 2, outcome.Canceled: 3,
		outcome.Expired: 4, outcome.Taken: 4, outcome.Unreachable: 4, outcome.Error: 4,
	}
	lostReason = [outcome.Count]int{
		outcome.OK: 3, outcome.NotAcquired: 3, outcome.Timeout: 3, outcome.Canceled: 3,
		outcome.Expired: 0, outcome.Taken: 1, outcome.Unreachable: 2, outcome.Error: 3,
	}
	renewalResult = [outcome.Count]int{
		outcome.OK: 0, outcome.NotAcquired: 1, outcome.Timeout: 1, outcome.Canceled: 1,
		outcome.Expired: 2, outcome.Taken: 2, outcome.Unreachable: 2, outcome.Error: 1,
	}
)

// lostReasonName is the dlock.lost.reason of a loss with outcome o.
func lostReasonName(o outcome.Outcome) string { return lostReasons[lostReason[o]] }
