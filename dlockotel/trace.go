package dlockotel

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Lock calls c.Lock(ctx, key, opts...) inside a dlock.acquire span, a child
// of ctx's span. Redis commands traced from ctx (for example by go-redis's
// redisotel) are children of the acquire span. Release the lock with
// Unlock to trace the release too.
func (t *Telemetry) Lock(ctx context.Context, c *dlock.Client, key string, opts ...dlock.LockOption) (*dlock.Lock, error) {
	return t.acquire(ctx, c, key, true, opts)
}

// TryLock calls c.TryLock(ctx, key, opts...) inside a dlock.acquire span,
// like Lock. A busy key (dlock.ErrNotAcquired) does not make the span's
// status Error.
func (t *Telemetry) TryLock(ctx context.Context, c *dlock.Client, key string, opts ...dlock.LockOption) (*dlock.Lock, error) {
	return t.acquire(ctx, c, key, false, opts)
}

// Unlock calls lk.Unlock(ctx) inside a dlock.release span, a child of ctx's
// span.
func (t *Telemetry) Unlock(ctx context.Context, lk *dlock.Lock) error {
	key := lk.Key()
	ctx, span := t.tracer.Start(ctx, "dlock.release", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(t.keyAttrs(key, attrFence.Int64(int64(lk.Fence())))...))
	defer span.End()
	t.corr.beginRelease(key)
	err := lk.Unlock(ctx)
	info, ok := t.corr.endRelease(key, err)
	span.SetAttributes(attrReleaseResult.String(renewalResult(err)))
	if ok && info.Err == nil {
		span.SetAttributes(attrHoldDuration.Float64(info.Held.Seconds()))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// Do is c.Do traced: it runs fn while holding key, inside a dlock.do span
// (a child of ctx's span) that is the parent of the dlock.acquire span, of
// the dlock.release span and of every span fn starts from its ctx. It keeps
// c.Do's contract: fn's ctx is cancelled when the lock is lost, with
// context.Cause set to the loss error; the lock is released when fn
// returns, within the Client's Options().ReleaseTimeout, even if ctx is
// done by then; Do returns the acquire error, or fn's error joined with any
// loss or release error.
func (t *Telemetry) Do(ctx context.Context, c *dlock.Client, key string, fn func(ctx context.Context) error, opts ...dlock.LockOption) (err error) {
	ctx, span := t.tracer.Start(ctx, "dlock.do", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(t.keyAttrs(key)...))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()

	lk, err := t.Lock(ctx, c, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	go func() {
		select {
		case <-lk.Done():
			cancel(lk.Err())
		case <-stop:
		}
	}()
	ferr := fn(fctx)
	close(stop)
	cancel(nil)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), c.Options().ReleaseTimeout)
	defer rcancel()
	return errors.Join(ferr, t.Unlock(rctx, lk))
}

func (t *Telemetry) acquire(ctx context.Context, c *dlock.Client, key string, wait bool, opts []dlock.LockOption) (*dlock.Lock, error) {
	mode := "try"
	if wait {
		mode = "lock"
	}
	caller := trace.SpanFromContext(ctx)
	start := time.Now()
	ctx, span := t.tracer.Start(ctx, "dlock.acquire", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(start), trace.WithAttributes(t.keyAttrs(key, attrMode.String(mode))...))
	defer span.End()

	t.corr.beginAcquire(key)
	var lk *dlock.Lock
	var err error
	if wait {
		lk, err = c.Lock(ctx, key, opts...)
	} else {
		lk, err = c.TryLock(ctx, key, opts...)
	}
	var fence uint64
	if lk != nil {
		fence = lk.Fence()
	}
	info, ok := t.corr.endAcquire(key, fence, err)

	result := acquireResult(err)
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, attrAcquireResult.String(result))
	if ok {
		attrs = append(attrs,
			attrWaitDuration.Float64(info.Wait.Seconds()),
			attrAttempts.Int(info.Attempts),
			attrWaited.Bool(info.Waited))
	} else {
		attrs = append(attrs, attrWaitDuration.Float64(time.Since(start).Seconds()))
	}
	if err == nil {
		attrs = append(attrs, attrFence.Int64(int64(fence)))
	}
	span.SetAttributes(attrs...)
	if err != nil && result != resultBusy {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}

	// Remember where a loss should be reported, if the hooks are installed
	// (ok: they saw this acquire, so they will see the loss too).
	if err == nil && ok {
		t.corr.hold(key, &heldLock{fence: fence, caller: caller, acquire: span.SpanContext()})
		if lk.Err() != nil { // lost already, maybe before hold: don't keep it
			t.corr.forget(key, fence)
		}
	}
	return lk, err
}

// lostSpan reports a loss: a dlock.lost span, and an event on the span
// that was current when the lock was taken, if it is still recording.
func (t *Telemetry) lostSpan(i dlock.LostInfo, h *heldLock) {
	attrs := t.keyAttrs(i.Key,
		attrFence.Int64(int64(i.Fence)),
		attrLostReason.String(lostReason(i.Cause)),
		attrHoldDuration.Float64(i.Held.Seconds()))
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...)}
	ctx := context.Background()
	if h != nil {
		parent := h.caller.SpanContext()
		if !parent.IsValid() {
			parent = h.acquire
		}
		ctx = trace.ContextWithSpanContext(ctx, parent)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: h.acquire}))
		if h.caller.IsRecording() {
			h.caller.AddEvent("dlock.lost", trace.WithAttributes(attrs...))
		}
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	_, span := t.tracer.Start(ctx, "dlock.lost", opts...)
	msg := "lock lost"
	if i.Cause != nil {
		span.RecordError(i.Cause)
		msg += ": " + i.Cause.Error()
	}
	span.SetStatus(codes.Error, msg)
	span.End()
}

// keyAttrs returns attrs with dlock.key in front if WithKeyAttribute was
// given.
func (t *Telemetry) keyAttrs(key string, attrs ...attribute.KeyValue) []attribute.KeyValue {
	if t.keyAttr == nil {
		return attrs
	}
	return append([]attribute.KeyValue{attrKey.String(t.keyAttr(key))}, attrs...)
}
