package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

type ctxTag struct{}

// tagOf returns the ctxTag value ctx carries, "" if none.
func tagOf(ctx context.Context) string {
	s, _ := ctx.Value(ctxTag{}).(string)
	return s
}

func tagged(parent context.Context, tag string) context.Context {
	return context.WithValue(parent, ctxTag{}, tag)
}

// event is one hook call, as recordHooks saw it.
type event struct {
	kind     string // acquire, release, renew, lost
	tag      string // the ctx's ctxTag
	ctxErr   error  // the ctx's Err when the hook ran
	err      error
	key      string
	try      bool
	fenceSet bool
}

type recorder struct {
	mu     sync.Mutex
	events []event
}

func (r *recorder) add(ctx context.Context, e event) {
	e.tag, e.ctxErr = tagOf(ctx), ctx.Err()
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) hooks() dlock.Hooks {
	return dlock.Hooks{
		Acquire: func(ctx context.Context, i dlock.AcquireInfo) {
			r.add(ctx, event{kind: "acquire", err: i.Err, key: i.Key, try: i.Try, fenceSet: i.Fence != 0})
		},
		Release: func(ctx context.Context, i dlock.ReleaseInfo) {
			r.add(ctx, event{kind: "release", err: i.Err, key: i.Key})
		},
		Renew: func(ctx context.Context, i dlock.RenewInfo) {
			r.add(ctx, event{kind: "renew", err: i.Err, key: i.Key})
		},
		Lost: func(ctx context.Context, i dlock.LostInfo) {
			r.add(ctx, event{kind: "lost", err: i.Cause, key: i.Key})
		},
	}
}

func (r *recorder) all() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

// wait waits until pred holds for the events seen so far.
func (r *recorder) wait(t *testing.T, what string, pred func([]event) bool) []event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ev := r.all()
		if pred(ev) {
			return ev
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s; events: %+v", what, ev)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func count(ev []event, kind string) int {
	n := 0
	for _, e := range ev {
		if e.kind == kind {
			n++
		}
	}
	return n
}

// TestAddHooksAfterNew: hooks added after New see a lock taken after
// them, and run after the hooks given to New, in the order added.
func TestAddHooksAfterNew(t *testing.T) {
	var order []string
	var mu sync.Mutex
	note := func(s string) func(context.Context, dlock.AcquireInfo) {
		return func(context.Context, dlock.AcquireInfo) { mu.Lock(); order = append(order, s); mu.Unlock() }
	}
	c, _ := newClient(t, dlock.Options{Hooks: dlock.Hooks{Acquire: note("new")}})
	k := key(t)
	lk, err := c.Lock(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	c.AddHooks(rec.hooks())
	c.AddHooks(dlock.Hooks{Acquire: note("added")})
	c.AddHooks(dlock.Hooks{}) // adds nothing
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ev := rec.all(); len(ev) != 1 || ev[0].kind != "release" || ev[0].key != k {
		t.Fatalf("hooks added while the lock was held saw %+v, want its release", ev)
	}
	lk, err = c.Lock(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(t.Context())
	ev := rec.all()
	if len(ev) != 2 || ev[1].kind != "acquire" || ev[1].err != nil || !ev[1].fenceSet {
		t.Fatalf("events %+v, want the release then the acquire", ev)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(order) != "[new new added]" {
		t.Fatalf("Acquire hooks ran %v, want [new new added]", order)
	}
	if c.Options().Hooks.Release != nil {
		t.Error("AddHooks changed Options().Hooks")
	}
}

// TestHooksGetCallerContext: the hooks of Lock, TryLock, Extend and
// Unlock get the ctx given to that call.
func TestHooksGetCallerContext(t *testing.T) {
	var rec recorder
	c, rdb := newClient(t, dlock.Options{Hooks: rec.hooks()})
	k := key(t)
	lk, err := c.Lock(tagged(t.Context(), "lock"), k)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.TryLock(tagged(t.Context(), "try"), k)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock on a held key: %v", err)
	}
	if err := lk.Extend(tagged(t.Context(), "extend"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(tagged(t.Context(), "unlock")); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(rec.all())
	want := fmt.Sprint([]event{
		{kind: "acquire", tag: "lock", key: k, fenceSet: true},
		{kind: "acquire", tag: "try", key: k, try: true, err: rec.all()[1].err},
		{kind: "renew", tag: "extend", key: k},
		{kind: "release", tag: "unlock", key: k},
	})
	if got != want {
		t.Fatalf("events\n%s\nwant\n%s", got, want)
	}

	// Do: its ctx for both the acquire and the release.
	rec.mu.Lock()
	rec.events = nil
	rec.mu.Unlock()
	if err := c.Do(tagged(t.Context(), "do"), k, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, e := range rec.all() {
		if e.tag != "do" {
			t.Errorf("Do: %s hook got tag %q", e.kind, e.tag)
		}
	}
	if n := len(rec.all()); n != 2 {
		t.Errorf("Do: %d events, want 2", n)
	}

	// A loss found by Unlock is reported with Unlock's ctx.
	lk, err = c.Lock(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(t.Context(), k)
	if err := lk.Unlock(tagged(t.Context(), "unlock-lost")); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Unlock of a deleted lock: %v", err)
	}
	// Lost, then Release with the loss, both with Unlock's ctx.
	ev := rec.all()
	if len(ev) < 2 {
		t.Fatalf("events %+v", ev)
	}
	lost, rel := ev[len(ev)-2], ev[len(ev)-1]
	if lost.kind != "lost" || lost.tag != "unlock-lost" || !errors.Is(lost.err, dlock.ErrExpired) {
		t.Errorf("event %+v, want lost with Unlock's ctx", lost)
	}
	if rel.kind != "release" || rel.tag != "unlock-lost" || !errors.Is(rel.err, dlock.ErrLost) {
		t.Errorf("last event %+v, want the release with the loss, with Unlock's ctx", rel)
	}
}

// TestWatchdogHooksGetLockContext: renewals and losses the watchdog finds
// are reported with the acquire's ctx values, even after that ctx is
// cancelled.
func TestWatchdogHooksGetLockContext(t *testing.T) {
	var rec recorder
	c, rdb := newClient(t, dlock.Options{Hooks: rec.hooks()})
	k := key(t)
	ctx, cancel := context.WithCancel(tagged(t.Context(), "acquire"))
	lk, err := c.Lock(ctx, k, dlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the lock outlives its acquire's ctx
	rec.wait(t, "watchdog renewal", func(ev []event) bool { return count(ev, "renew") > 0 })
	rdb.Set(t.Context(), k, "thief", time.Minute)
	if err := waitDone(t, lk, 3*time.Second); !errors.Is(err, dlock.ErrTaken) {
		t.Fatalf("Err = %v, want ErrTaken", err)
	}
	ev := rec.wait(t, "loss", func(ev []event) bool { return count(ev, "lost") > 0 })
	for _, e := range ev[1:] {
		if e.tag != "acquire" || e.ctxErr != nil {
			t.Errorf("%s hook: ctx tag %q, ctx.Err %v; want the acquire's values, not cancelled", e.kind, e.tag, e.ctxErr)
		}
	}
	if ev[0].kind != "acquire" || ev[0].tag != "acquire" {
		t.Errorf("first event %+v", ev[0])
	}
	// Unlock of the lost lock: a Release event with the loss, Unlock's ctx.
	if err := lk.Unlock(tagged(t.Context(), "late")); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Unlock of a lost lock: %v", err)
	}
	ev = rec.all()
	if e := ev[len(ev)-1]; e.kind != "release" || e.tag != "late" || !errors.Is(e.err, dlock.ErrTaken) {
		t.Errorf("last event %+v, want the release with the loss, with Unlock's ctx", e)
	}
}

// TestCloseReleaseGetsLockContext: a lock Close releases is reported with
// the lock's context.
func TestCloseReleaseGetsLockContext(t *testing.T) {
	var rec recorder
	c, _ := newClient(t, dlock.Options{Hooks: rec.hooks()})
	if _, err := c.Lock(tagged(t.Context(), "acquire"), key(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	ev := rec.all()
	if len(ev) != 2 || ev[1].kind != "release" || ev[1].tag != "acquire" || ev[1].err != nil {
		t.Fatalf("events %+v, want the release with the acquire's ctx", ev)
	}
}

// TestAddHooksConcurrent adds hooks while locks are taken and released:
// the race detector checks it, and every hook added before a call ends
// sees that call.
func TestAddHooksConcurrent(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	k := key(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				lk, err := c.Lock(t.Context(), fmt.Sprintf("%s-%d-%d", k, g, i%8))
				if err != nil {
					t.Error(err)
					return
				}
				lk.Unlock(t.Context())
			}
		}()
	}
	var calls [8]atomic.Int64
	for i := range calls {
		c.AddHooks(dlock.Hooks{Acquire: func(context.Context, dlock.AcquireInfo) { calls[i].Add(1) }})
		time.Sleep(5 * time.Millisecond)
	}
	lk, err := c.Lock(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	lk.Unlock(t.Context())
	close(stop)
	wg.Wait()
	for i := 1; i < len(calls); i++ {
		if calls[i].Load() > calls[i-1].Load() || calls[i].Load() == 0 {
			t.Fatalf("hook %d ran %d times, hook %d %d times", i, calls[i].Load(), i-1, calls[i-1].Load())
		}
	}
}

// TestReleaseHookOnceAfterLoss: a lock whose Unlock finds it lost reports
// Lost once and Release once, however often Unlock is called again; each
// Unlock still returns the loss.
func TestReleaseHookOnceAfterLoss(t *testing.T) {
	var lost, rel atomic.Int32
	c, rdb := newClient(t, dlock.Options{Hooks: dlock.Hooks{
		Lost:    func(context.Context, dlock.LostInfo) { lost.Add(1) },
		Release: func(context.Context, dlock.ReleaseInfo) { rel.Add(1) },
	}})
	ctx := t.Context()
	k := key(t)
	lk, err := c.Lock(ctx, k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, k) // lost: the key is gone
	for range 3 {
		if err := lk.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
			t.Fatalf("Unlock of a lost lock: %v", err)
		}
	}
	if lost.Load() != 1 || rel.Load() != 1 {
		t.Fatalf("after 3 Unlocks of a lost lock: Lost fired %d times, Release %d; want 1 and 1", lost.Load(), rel.Load())
	}
}
