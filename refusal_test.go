package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
)

// A refusal: an error reply by which a Cluster node refuses a command
// before running it, as the fault layer returns it in place of sending
// the command.
type refusal string

func (e refusal) Error() string { return string(e) }
func (refusal) RedisError()     {}

const (
	tryAgain = refusal("TRYAGAIN Multiple keys request during rehashing of slot")
	askElse  = refusal("ASK 11694 127.0.0.1:1")
	// Raised by a script part-way through (after its earlier writes): not
	// a refusal, never retried blindly.
	nonLocal = refusal("ERR Script attempted to access a non local key in a cluster node script: 0123, on @user_script:39.")
)

// Every kind of call sends a refused script call again within its bound,
// counts each refusal, and only then answers.
func TestRefusalRetriedWithinDeadline(t *testing.T) {
	c, inj := faultyClient(t, dlock.Options{})
	k := key(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	acq := inj.Add(faultcmd.Rule{Name: "acquire refused", Action: faultcmd.FailBefore, Times: 3,
		Match: faultcmd.Match{Script: "acquire", Key: k}, Err: tryAgain})
	lk, err := c.Lock(ctx, k)
	if err != nil {
		t.Fatalf("Lock refused 3 times, ctx with time left: %v", err)
	}
	if acq.Fired() != 3 || c.Stats().Refusals != 3 {
		t.Fatalf("refusals: rule fired %d, Stats.Refusals %d; want 3, 3", acq.Fired(), c.Stats().Refusals)
	}

	ext := inj.Add(faultcmd.Rule{Name: "renewal refused", Action: faultcmd.FailBefore, Times: 2,
		Match: faultcmd.Match{Script: "extend", Key: k}, Err: askElse})
	if err := lk.Extend(ctx, 30*time.Second); err != nil {
		t.Fatalf("Extend refused twice: %v", err)
	}
	if ext.Fired() != 2 {
		t.Fatalf("extend refusals fired %d, want 2", ext.Fired())
	}

	rel := inj.Add(faultcmd.Rule{Name: "release refused", Action: faultcmd.FailBefore, Times: 2,
		Match: faultcmd.Match{Script: "release", Key: k}, Err: refusal("CLUSTERDOWN The cluster is down")})
	if err := lk.Unlock(ctx); err != nil {
		t.Fatalf("Unlock refused twice: %v", err)
	}
	if rel.Fired() != 2 || c.Stats().Refusals != 7 {
		t.Fatalf("release refusals fired %d, Stats.Refusals %d; want 2, 7", rel.Fired(), c.Stats().Refusals)
	}

	// Admin: ForceRelease's release; Counter: its scripts.
	if _, err := c.Lock(ctx, k); err != nil {
		t.Fatal(err)
	}
	force := inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Times: 2, Match: faultcmd.Match{Script: "release", Key: k}, Err: tryAgain})
	if ok, err := adminOf(t, c).ForceRelease(ctx, k); !ok || err != nil || force.Fired() != 2 {
		t.Fatalf("ForceRelease refused twice = %v, %v (refusals fired %d)", ok, err, force.Fired())
	}
	stock := c.Counter(key(t), 2)
	set := inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Times: 2, Match: faultcmd.Match{Script: "counter_set"}, Err: tryAgain})
	if err := stock.Set(ctx, 10); err != nil {
		t.Fatalf("Counter.Set refused twice: %v", err)
	}
	add := inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Times: 2, Match: faultcmd.Match{Script: "counter_add"}, Err: tryAgain})
	if _, err := stock.Take(ctx, 1, func(context.Context, int) error { return nil }); err != nil {
		t.Fatalf("Counter.Take refused twice: %v", err)
	}
	if n, err := stock.Total(ctx); err != nil || n != 9 {
		t.Fatalf("Total = %d, %v; want 9", n, err)
	}
	// Set sends its two segments' calls in one pipeline, and the fault
	// layer fails the calls after a refused one in a pipeline too: 4
	// refusals, then 2 of Take (the admin Client's are not c's).
	if set.Fired() != 2 || add.Fired() != 2 || c.Stats().Refusals != 13 {
		t.Fatalf("counter refusals fired %d and %d, Stats.Refusals %d; want 2, 2, 13", set.Fired(), add.Fired(), c.Stats().Refusals)
	}
}

// When the ctx ends first, the call fails with its own deadline and names
// the last refusal; an error a script raised part-way is no refusal.
func TestRefusalUntilDeadline(t *testing.T) {
	c, inj := faultyClient(t, dlock.Options{})
	k := key(t)
	h := inj.Add(faultcmd.Rule{Name: "acquire refused", Action: faultcmd.FailBefore, Times: -1,
		Match: faultcmd.Match{Script: "acquire", Key: k}, Err: tryAgain})
	start := time.Now() // before the ctx's deadline is set, so took below is not short of it
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	_, err := c.Lock(ctx, k)
	if !errors.Is(err, dlock.ErrContextDone) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Lock refused until its deadline = %v; want ErrContextDone, DeadlineExceeded and ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), string(tryAgain)) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %q does not name the refusal on one line", err)
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Fatalf("Lock gave up after %v, before its deadline", took)
	}
	if h.Fired() < 2 {
		t.Fatalf("acquire sent %d times, want retries", h.Fired())
	}
	h.Remove()

	// Unlock's release, refused until the Unlock's deadline: the lock stays
	// held (the Unlock may be retried), the error names the refusal.
	lk, err := c.Lock(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	h = inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Times: -1, Match: faultcmd.Match{Script: "release", Key: k}, Err: askElse})
	uctx, ucancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer ucancel()
	if err := lk.Unlock(uctx); !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), string(askElse)) {
		t.Fatalf("Unlock refused until its deadline = %v; want ErrUnavailable naming %q", err, askElse)
	}
	h.Remove()
	if err := lk.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock again: %v", err)
	}

	// Not a refusal: answered at once, sent once.
	before := c.Stats().Refusals
	h = inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Times: -1, Match: faultcmd.Match{Script: "acquire", Key: k}, Err: nonLocal})
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	if _, err := c.Lock(ctx2, k); !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrContextDone) {
		t.Fatalf("Lock whose script failed part-way = %v; want ErrUnavailable at once", err)
	}
	if h.Fired() != 1 || c.Stats().Refusals != before {
		t.Fatalf("script failed part-way: sent %d times, %d refusals counted; want 1, 0", h.Fired(), c.Stats().Refusals-before)
	}
}

// A renewal refused until its lease's deadline is not sent past it, even
// when the caller's ctx allows more.
func TestRefusalRenewalWithinLease(t *testing.T) {
	c, inj := faultyClient(t, dlock.Options{})
	k := key(t)
	lk, err := c.Lock(context.Background(), k, dlock.WithTTL(3*time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	deadline := lk.Deadline()
	const name = "renewal refused to the end"
	h := inj.Add(faultcmd.Rule{Name: name, Action: faultcmd.FailBefore, Times: -1, Match: faultcmd.Match{Script: "extend", Key: k}, Err: tryAgain})
	err = lk.Extend(context.Background(), time.Second)
	if err == nil {
		t.Fatal("Extend refused until the lease's deadline succeeded")
	}
	ended := time.Now()
	if ended.After(deadline.Add(5 * time.Second)) {
		t.Fatalf("Extend retried until %v, past the lease's deadline %v", ended, deadline)
	}
	n := h.Fired()
	if n < 2 {
		t.Fatalf("Extend sent %d times, want retries", n)
	}
	for _, e := range inj.Log() {
		if e.Rule == name && e.At.After(deadline) {
			t.Fatalf("renewal sent at %v, after the lease's deadline %v", e.At, deadline)
		}
	}
}

// Close ends the calls riding out a Cluster's refusals: a TryLock or a
// Lock whose acquire is refused returns ErrClosed soon after Close starts,
// not at its deadline.
func TestRefusalEndsOnClose(t *testing.T) {
	c, inj := faultyClient(t, dlock.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type result struct {
		err  error
		when time.Time
	}
	calls := map[string]func(string) error{
		"TryLock": func(k string) error { _, err := c.TryLock(ctx, k); return err },
		"Lock":    func(k string) error { _, err := c.Lock(ctx, k); return err },
	}
	done := map[string]chan result{}
	for name, call := range calls {
		k := key(t)
		h := inj.Add(faultcmd.Rule{Name: name + " refused", Action: faultcmd.FailBefore, Times: -1,
			Match: faultcmd.Match{Script: "acquire", Key: k}, Err: tryAgain})
		ch := make(chan result, 1)
		done[name] = ch
		go func() {
			err := call(k)
			ch <- result{err, time.Now()}
		}()
		select {
		case <-h.FiredC():
		case <-time.After(time.Minute):
			t.Fatalf("%s's acquire was not sent", name)
		}
	}
	time.Sleep(50 * time.Millisecond) // into the back-off
	closed := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for name, ch := range done {
		var r result
		select {
		case r = <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s still riding out refusals 30s after Close", name)
		}
		took := r.when.Sub(closed)
		t.Logf("%s returned %v after Close started: %v", name, took.Round(time.Millisecond), r.err)
		if !errors.Is(r.err, dlock.ErrClosed) || errors.Is(r.err, dlock.ErrUnavailable) {
			t.Errorf("%s refused until Close = %v, want ErrClosed (not ErrUnavailable)", name, r.err)
		}
		// Its deadline is a minute away; one back-off wait is at most 250ms.
		if took > 10*time.Second {
			t.Errorf("%s returned %v after Close started, not at once", name, took)
		}
	}
}
