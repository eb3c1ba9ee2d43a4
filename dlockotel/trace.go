package dlockotel

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/outcome"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Do is c.Do inside a dlock.do span, a child of ctx's span: the span is
// current in the ctx c.Do gets, so the acquire and release spans the hooks
// make and the spans fn starts from its ctx are its children, and so is a
// dlock.lost span if the lock is lost while fn runs. It returns c.Do's
// error.
func (t *Telemetry) Do(ctx context.Context, c *dlock.Client, key string, fn func(ctx context.Context) error, opts ...dlock.LockOption) error {
	ctx, span := t.tracer.Start(ctx, "dlock.do", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(t.keyAttrs(key)...))
	defer span.End()
	ev := &lostEvent{}
	err := c.Do(context.WithValue(ctx, lostEventKey{}, ev), key, fn, opts...)
	if err != nil {
		if errors.Is(err, dlock.ErrLost) && ev.done.CompareAndSwap(false, true) {
			// The lock's Done (and so fn's ctx) ends before the Lost hook
			// runs: the hook may come after this span ends, so the event
			// is added here, once.
			span.AddEvent("dlock.lost", trace.WithAttributes(t.keyAttrs(key,
				attrLostReason.String(lostReasonName(outcome.Of(err))))...))
		}
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// lostEvent marks a Do's ctx: whichever of Do and the Lost hook comes
// first adds the do span's dlock.lost event.
type lostEvent struct{ done atomic.Bool }

type lostEventKey struct{}

// acquireSpan records a Lock or TryLock call as a dlock.acquire span, a
// child of the call's ctx's span, from the call's start to now.
func (t *Telemetry) acquireSpan(ctx context.Context, i dlock.AcquireInfo, o outcome.Outcome) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return // an untraced call: no span, and no cost
	}
	span, end := t.start(ctx, "dlock.acquire", i.Wait)
	if !span.IsRecording() {
		span.End(trace.WithTimestamp(end))
		return
	}
	mode := "lock"
	if i.Try {
		mode = "try"
	}
	attrs := t.keyAttrs(i.Key,
		attrMode.String(mode),
		attrAcquireResult.String(acquireResults[acquireResult[o]]),
		attrWaitDuration.Float64(i.Wait.Seconds()),
		attrAttempts.Int(i.Attempts),
		attrWaited.Bool(i.Waited))
	if i.Err == nil {
		attrs = append(attrs, attrFence.Int64(int64(i.Fence)))
	}
	status := errStatus(i.Err)
	if o == outcome.NotAcquired {
		status = "" // busy is an answer, not a failure
	}
	finish(span, end, attrs, i.Err, status)
}

// releaseSpan records an Unlock as a dlock.release span, a child of the
// Unlock's ctx's span.
func (t *Telemetry) releaseSpan(ctx context.Context, i dlock.ReleaseInfo, o outcome.Outcome) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	span, end := t.start(ctx, "dlock.release", i.Took)
	if !span.IsRecording() {
		span.End(trace.WithTimestamp(end))
		return
	}
	attrs := t.keyAttrs(i.Key,
		attrFence.Int64(int64(i.Fence)),
		attrReleaseResult.String(renewalResults[renewalResult[o]]))
	if i.Err == nil {
		attrs = append(attrs, attrHoldDuration.Float64(i.Held.Seconds()))
	}
	finish(span, end, attrs, i.Err, errStatus(i.Err))
}

// lostSpan reports a loss: a dlock.lost span, a child of the span current
// in the hook's ctx (the lock's: the one current when it was acquired, or
// the Unlock's or Extend's that found the loss), and an event on that span
// if it is still recording.
func (t *Telemetry) lostSpan(ctx context.Context, i dlock.LostInfo, o outcome.Outcome) {
	attrs := t.keyAttrs(i.Key,
		attrFence.Int64(int64(i.Fence)),
		attrLostReason.String(lostReasonName(o)),
		attrHoldDuration.Float64(i.Held.Seconds()))
	if caller := trace.SpanFromContext(ctx); caller.IsRecording() {
		if ev, _ := ctx.Value(lostEventKey{}).(*lostEvent); ev == nil || ev.done.CompareAndSwap(false, true) {
			caller.AddEvent("dlock.lost", trace.WithAttributes(attrs...))
		}
	}
	status := "lock lost"
	if i.Cause != nil {
		status += ": " + i.Cause.Error()
	}
	span, end := t.start(ctx, "dlock.lost", 0)
	finish(span, end, attrs, i.Cause, status)
}

// start starts a span named name that ends now (the time it returns) and
// lasted d, a child of ctx's span (a root span if there is none).
func (t *Telemetry) start(ctx context.Context, name string, d time.Duration) (trace.Span, time.Time) {
	end := time.Now()
	_, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(end.Add(-d)))
	return span, end
}

// finish sets attrs on span and ends it at end. A non-nil err is recorded
// on it; a status other than "" makes its status Error, with that
// description.
func finish(span trace.Span, end time.Time, attrs []attribute.KeyValue, err error, status string) {
	span.SetAttributes(attrs...)
	if err != nil {
		span.RecordError(err)
	}
	if status != "" {
		span.SetStatus(codes.Error, status)
	}
	span.End(trace.WithTimestamp(end))
}

// errStatus is the status description of a span whose call returned err.
func errStatus(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// keyAttrs returns attrs with dlock.key in front if WithKeyAttribute was
// given.
func (t *Telemetry) keyAttrs(key string, attrs ...attribute.KeyValue) []attribute.KeyValue {
	if t.keyAttr == nil {
		return attrs
	}
	return append([]attribute.KeyValue{attrKey.String(t.keyAttr(key))}, attrs...)
}
