package dlockotel_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func childOf(t *testing.T, s sdktrace.ReadOnlySpan, parent trace.SpanContext) {
	t.Helper()
	if s.Parent().SpanID() != parent.SpanID() || s.SpanContext().TraceID() != parent.TraceID() {
		t.Errorf("%s: parent %v, want %v", s.Name(), s.Parent().SpanID(), parent.SpanID())
	}
}

func TestLockUnlock(t *testing.T) {
	e := newEnv(t, dlock.Options{})
	ctx, op := e.tracer.Start(t.Context(), "operation")
	k := key(t)
	lk, err := e.c.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	op.End()

	acq := e.one(t, "dlock.acquire")
	childOf(t, acq, op.SpanContext())
	a := attrs(acq)
	if a["dlock.acquire.mode"].AsString() != "lock" || a["dlock.acquire.result"].AsString() != "acquired" {
		t.Errorf("acquire mode/result = %v/%v", a["dlock.acquire.mode"], a["dlock.acquire.result"])
	}
	if got := a["dlock.fence"].AsInt64(); got != int64(lk.Fence()) || got <= 0 {
		t.Errorf("dlock.fence = %d, lock's fence %d", got, lk.Fence())
	}
	if got := a["dlock.acquire.attempts"].AsInt64(); got != 1 {
		t.Errorf("attempts = %d, want 1", got)
	}
	if v, ok := a["dlock.acquire.waited"]; !ok || v.AsBool() {
		t.Errorf("waited = %v (present %v), want false", v.AsBool(), ok)
	}
	if w := a["dlock.acquire.wait_duration"].AsFloat64(); w <= 0 || w > acq.EndTime().Sub(acq.StartTime()).Seconds() {
		t.Errorf("wait_duration = %v, span lasted %v", w, acq.EndTime().Sub(acq.StartTime()))
	}
	if _, ok := a["dlock.key"]; ok {
		t.Error("dlock.key present without WithKeyAttribute")
	}
	if acq.Status().Code != codes.Unset || acq.SpanKind() != trace.SpanKindInternal {
		t.Errorf("acquire status %v kind %v", acq.Status(), acq.SpanKind())
	}
	if acq.InstrumentationScope().Name != dlockotel.ScopeName {
		t.Errorf("scope %q", acq.InstrumentationScope().Name)
	}

	rel := e.one(t, "dlock.release")
	childOf(t, rel, op.SpanContext())
	r := attrs(rel)
	if r["dlock.release.result"].AsString() != "ok" || r["dlock.fence"].AsInt64() != int64(lk.Fence()) {
		t.Errorf("release attrs %v", rel.Attributes())
	}
	if h, ok := r["dlock.hold.duration"]; !ok || h.AsFloat64() <= 0 {
		t.Errorf("hold.duration = %v (present %v)", h.AsFloat64(), ok)
	}
}

func TestAcquireOutcomes(t *testing.T) {
	e := newEnv(t, dlock.Options{RetryInterval: 20 * time.Millisecond})
	ctx, op := e.tracer.Start(t.Context(), "operation")
	defer op.End()
	k := key(t)
	holder, err := e.c.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}

	// busy: not an error status
	if _, err := e.c.TryLock(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock on a held key: %v", err)
	}
	// timeout after waiting
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = e.c.Lock(tctx, k)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a deadline: %v", err)
	}
	// canceled before the call
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.c.Lock(cctx, k); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with a cancelled ctx: %v", err)
	}
	// hand-off: waits, then gets it
	done := make(chan *dlock.Lock)
	go func() {
		lk, err := e.c.Lock(ctx, k)
		if err != nil {
			t.Error(err)
		}
		done <- lk
	}()
	eventually(t, 5*time.Second, "a waiter", func() bool { return e.c.Stats().Waiting == 1 })
	time.Sleep(30 * time.Millisecond) // let it retry at least once more
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

	spans := e.ended("dlock.acquire")
	if len(spans) != 5 {
		t.Fatalf("%d acquire spans, want 5", len(spans))
	}
	type want struct {
		mode, result string
		status       codes.Code
		waited       bool
		minAttempts  int64
		fence        bool
	}
	for i, w := range []want{
		{"try", "acquired", codes.Unset, false, 1, true},
		{"try", "busy", codes.Unset, false, 1, false},
		{"lock", "timeout", codes.Error, true, 1, false},
		{"lock", "canceled", codes.Error, false, 0, false},
		{"lock", "acquired", codes.Unset, true, 2, true},
	} {
		s := spans[i]
		a := attrs(s)
		if a["dlock.acquire.mode"].AsString() != w.mode || a["dlock.acquire.result"].AsString() != w.result {
			t.Errorf("span %d: mode/result %v/%v, want %s/%s", i,
				a["dlock.acquire.mode"].AsString(), a["dlock.acquire.result"].AsString(), w.mode, w.result)
		}
		if s.Status().Code != w.status {
			t.Errorf("span %d (%s): status %v, want %v", i, w.result, s.Status(), w.status)
		}
		if w.status == codes.Error && len(s.Events()) == 0 {
			t.Errorf("span %d (%s): error not recorded", i, w.result)
		}
		if got := a["dlock.acquire.waited"].AsBool(); got != w.waited {
			t.Errorf("span %d (%s): waited %v, want %v", i, w.result, got, w.waited)
		}
		if got := a["dlock.acquire.attempts"].AsInt64(); got < w.minAttempts {
			t.Errorf("span %d (%s): attempts %d, want at least %d", i, w.result, got, w.minAttempts)
		}
		if _, ok := a["dlock.fence"]; ok != w.fence {
			t.Errorf("span %d (%s): fence present %v, want %v", i, w.result, ok, w.fence)
		}
	}
	if got := attrs(spans[4])["dlock.acquire.wait_duration"].AsFloat64(); got < 0.03 {
		t.Errorf("hand-off wait_duration %v, want at least 30ms", got)
	}
}

func TestDo(t *testing.T) {
	e := newEnv(t, dlock.Options{}, dlockotel.WithKeyAttribute(func(k string) string { return k }))
	ctx, op := e.tracer.Start(t.Context(), "operation")
	k := key(t)
	var inner trace.SpanContext
	boom := errors.New("boom")
	err := e.tel.Do(ctx, e.c, k, func(ctx context.Context) error {
		_, s := e.tracer.Start(ctx, "work")
		inner = s.SpanContext()
		s.End()
		return boom
	})
	op.End()
	if !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want boom", err)
	}

	do := e.one(t, "dlock.do")
	childOf(t, do, op.SpanContext())
	if do.Status().Code != codes.Error {
		t.Errorf("do status %v, want Error", do.Status())
	}
	for _, name := range []string{"dlock.acquire", "work", "dlock.release"} {
		s := e.one(t, name)
		childOf(t, s, do.SpanContext())
		if name != "work" {
			if got := attrs(s)["dlock.key"].AsString(); got != k {
				t.Errorf("%s: dlock.key = %q, want %q", name, got, k)
			}
		}
	}
	if inner.SpanID() != e.one(t, "work").SpanContext().SpanID() {
		t.Error("work span mismatch")
	}
	if got := attrs(do)["dlock.key"].AsString(); got != k {
		t.Errorf("do: dlock.key = %q", got)
	}
	// Acquire fails: Do returns the acquire error; no release span.
	holder, err := e.c.TryLock(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Unlock(t.Context())
	tctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	called := false
	err = e.tel.Do(tctx, e.c, k, func(context.Context) error { called = true; return nil })
	if !errors.Is(err, dlock.ErrContextDone) || called {
		t.Fatalf("Do on a held key = %v (fn called %v)", err, called)
	}
	if n := len(e.ended("dlock.release")); n != 1 {
		t.Errorf("%d release spans, want 1", n)
	}
}

// TestLostInDo loses the lock while fn runs: fn's ctx is cancelled with the
// loss as cause, the do span gets a dlock.lost event, and a dlock.lost span
// hangs from it, next to the acquire span.
func TestLostInDo(t *testing.T) {
	e := newEnv(t, dlock.Options{})
	ctx := t.Context()
	k := key(t)
	var cause error
	err := e.tel.Do(ctx, e.c, k, func(ctx context.Context) error {
		if err := e.rdb.Set(ctx, k, "someone-else", time.Minute).Err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(5 * time.Second):
		}
		return nil
	}, dlock.WithTTL(150*time.Millisecond))
	if !errors.Is(err, dlock.ErrLost) || !errors.Is(cause, dlock.ErrTaken) {
		t.Fatalf("Do = %v, fn's cause %v; want a loss, taken", err, cause)
	}

	do, acq := e.one(t, "dlock.do"), e.one(t, "dlock.acquire")
	lost := e.lostSpan(t)
	childOf(t, lost, do.SpanContext())
	childOf(t, acq, do.SpanContext())
	a := attrs(lost)
	if a["dlock.lost.reason"].AsString() != "taken" || a["dlock.fence"] != attrs(acq)["dlock.fence"] {
		t.Errorf("lost attrs %v", lost.Attributes())
	}
	if lost.Status().Code != codes.Error {
		t.Errorf("lost status %v", lost.Status())
	}
	found := false
	for _, ev := range do.Events() {
		found = found || ev.Name == "dlock.lost"
	}
	if !found {
		t.Errorf("no dlock.lost event on the do span: %v", do.Events())
	}
	rel := e.one(t, "dlock.release")
	if got := attrs(rel)["dlock.release.result"].AsString(); got != "lost" || rel.Status().Code != codes.Error {
		t.Errorf("release result %q status %v", got, rel.Status())
	}
}

// TestLostAfterLock: a lock from Lock expires after the caller's span
// ended; the lost span is still its child.
func TestLostAfterLock(t *testing.T) {
	e := newEnv(t, dlock.Options{})
	ctx, op := e.tracer.Start(t.Context(), "operation")
	lk, err := e.c.TryLock(ctx, key(t), dlock.WithTTL(30*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	op.End()
	<-lk.Done()
	lost := e.lostSpan(t)
	childOf(t, lost, op.SpanContext())
	if got := attrs(lost)["dlock.lost.reason"].AsString(); got != "expired" {
		t.Errorf("reason %q", got)
	}
	if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrExpired) {
		t.Fatalf("Unlock = %v", err)
	}
}

// TestLostUntraced: a lock taken with a ctx without a span gets no acquire
// span, but a root dlock.lost span.
func TestLostUntraced(t *testing.T) {
	e := newEnv(t, dlock.Options{})
	lk, err := e.c.TryLock(t.Context(), key(t), dlock.WithTTL(20*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	<-lk.Done()
	lost := e.lostSpan(t)
	if lost.Parent().IsValid() || len(lost.Links()) != 0 {
		t.Errorf("lost span parent %v links %v, want a root span", lost.Parent(), lost.Links())
	}
	if n := len(e.ended("dlock.acquire")); n != 0 {
		t.Errorf("%d acquire spans for an untraced call", n)
	}
}

// TestOwnHooksToo: the Telemetry's hooks, added after New, run after the
// Client's own, and both see every event.
func TestOwnHooksToo(t *testing.T) {
	var mine []string
	e := newEnv(t, dlock.Options{Hooks: dlock.Hooks{
		Acquire: func(_ context.Context, i dlock.AcquireInfo) { mine = append(mine, "acquire") },
		Release: func(_ context.Context, i dlock.ReleaseInfo) { mine = append(mine, "release") },
	}})
	ctx, op := e.tracer.Start(t.Context(), "operation")
	lk, err := e.c.TryLock(ctx, key(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	op.End()
	if got := strings.Join(mine, " "); got != "acquire release" {
		t.Errorf("own hooks saw %q", got)
	}
	a := attrs(e.one(t, "dlock.acquire"))
	if a["dlock.fence"].AsInt64() != int64(lk.Fence()) || a["dlock.acquire.attempts"].AsInt64() != 1 {
		t.Errorf("acquire attrs %v", a)
	}
	childOf(t, e.one(t, "dlock.release"), op.SpanContext())
}

// TestConcurrentSameKey has many goroutines lock one key, each with its
// own span, and others with none: every acquire span must hang from its
// caller's span and carry that caller's lock's fence and attempts; the
// untraced calls make none.
func TestConcurrentSameKey(t *testing.T) {
	e := newEnv(t, dlock.Options{})
	k := key(t)
	const traced, direct, rounds = 6, 2, 15
	var wg sync.WaitGroup
	var mu sync.Mutex
	fences := map[trace.SpanID]map[int64]bool{} // by caller span
	for range traced {
		wg.Go(func() {
			ctx, caller := e.tracer.Start(t.Context(), "caller")
			defer caller.End()
			mine := map[int64]bool{}
			for range rounds {
				lk, err := e.c.Lock(ctx, k)
				if err != nil {
					t.Error(err)
					return
				}
				mine[int64(lk.Fence())] = true
				if err := lk.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
			mu.Lock()
			fences[caller.SpanContext().SpanID()] = mine
			mu.Unlock()
		})
	}
	for range direct {
		wg.Go(func() {
			for range rounds {
				lk, err := e.c.Lock(t.Context(), k)
				if err != nil {
					t.Error(err)
					return
				}
				_ = lk.Unlock(t.Context())
			}
		})
	}
	wg.Wait()
	spans := e.ended("dlock.acquire")
	if len(spans) != traced*rounds {
		t.Fatalf("%d acquire spans, want %d", len(spans), traced*rounds)
	}
	seen := map[int64]bool{}
	for _, s := range spans {
		a := attrs(s)
		f := a["dlock.fence"].AsInt64()
		if seen[f] {
			t.Errorf("two acquire spans with fence %d", f)
		}
		seen[f] = true
		if a["dlock.acquire.attempts"].AsInt64() < 1 {
			t.Errorf("span with fence %d has no attempts", f)
		}
		if !fences[s.Parent().SpanID()][f] {
			t.Errorf("acquire span with fence %d hangs from a caller that did not get that fence", f)
		}
	}
	for _, s := range e.ended("dlock.release") {
		if _, ok := attrs(s)["dlock.hold.duration"]; !ok {
			t.Errorf("release span without hold.duration")
		}
	}
}
