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
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// holdMany takes n locks named prefix:i on c, 8 at a time.
func holdMany(t *testing.T, c *dlock.Client, prefix string, n int, opts ...dlock.LockOption) []*dlock.Lock {
	t.Helper()
	locks := make([]*dlock.Lock, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				lk, err := c.TryLock(t.Context(), fmt.Sprintf("%s:%d", prefix, i), opts...)
				if err != nil {
					errs <- err
					return
				}
				locks[i] = lk
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	return locks
}

// Close releases what the Client holds in pipelines, like renewals: a few
// round trips for thousands of locks, not one per lock (and no goroutine
// per lock).
func TestCloseBatchesReleases(t *testing.T) {
	const n = 5000
	rdb := srv.NewClient()
	rt := &roundTrips{}
	rdb.AddHook(rt)
	c, _ := newClientOn(t, rdb, dlock.Options{})
	prefix := key(t)
	holdMany(t, c, prefix, n, dlock.WithTTL(time.Minute))
	before := rt.n.Load()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	trips := rt.n.Load() - before
	t.Logf("Close released %d locks in %d round trips", n, trips)
	if trips > 4*n/512 {
		t.Fatalf("Close took %d round trips for %d locks, want pipelines", trips, n)
	}
	if s := c.Stats(); s.Held != 0 || s.Released != n {
		t.Fatalf("after Close: Held %d, Released %d", s.Held, s.Released)
	}
	if left := srv.Client(t).Keys(t.Context(), prefix+":*").Val(); len(left) != 0 {
		t.Fatalf("%d lock keys left after Close", len(left))
	}
}

// With the server gone, Close gives up at ReleaseTimeout and says how many
// locks it left to expire.
func TestCloseServerGone(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	const n, timeout = 2000, 500 * time.Millisecond
	c, _ := newClientOn(t, rdb, dlock.Options{ReleaseTimeout: timeout})
	locks := holdMany(t, c, "k", n, dlock.WithTTL(time.Minute))
	p.Blackhole(true) // connections stay open, nothing answers
	start := time.Now()
	err := c.Close()
	took := time.Since(start)
	var ce *dlock.CloseError
	if !errors.As(err, &ce) || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Close = %v, want a *CloseError matching ErrUnavailable", err)
	}
	if ce.Left != n || ce.Total != n {
		t.Fatalf("CloseError left %d of %d, want %d of %d", ce.Left, ce.Total, n, n)
	}
	// A safety bound, with slack for a loaded machine: ReleaseTimeout,
	// not one ReleaseTimeout per lock nor go-redis's 3s ReadTimeout.
	if took > timeout+2*time.Second {
		t.Fatalf("Close took %s with ReleaseTimeout %s", took, timeout)
	}
	t.Logf("Close with the server gone: %s: %v", took, err)
	// The locks Close left are no longer renewed, and the watchdog that
	// would have ended them at their deadline is gone: Close ends them,
	// so Done closes (work bound to it stops) and Err says why.
	for _, lk := range locks {
		select {
		case <-lk.Done():
		default:
			t.Fatalf("%s: Done still open after Close left it (Err %v)", lk.Key(), lk.Err())
		}
		if err := lk.Err(); !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrClosed) {
			t.Fatalf("%s: Err %v, want ErrLost and ErrClosed", lk.Key(), err)
		}
	}
	if h := c.Stats().Held; h != 0 {
		t.Fatalf("Stats().Held %d after Close", h)
	}
}

// When renewals wait longer than half an interval for a pipeline, the
// Client warns through Hooks.Behind (and its log) while the locks are
// still held, rather than losing them silently.
func TestWatchdogWarnsBehind(t *testing.T) {
	const n = 4800 // more than the pipelines in flight take at once (8 x 512)
	rdb := srv.NewClient()
	stall := &redistest.PipelineDelay{}
	rdb.AddHook(stall)
	var warned atomic.Pointer[dlock.BehindInfo]
	c, _ := newClientOn(t, rdb, dlock.Options{
		RenewInterval: 400 * time.Millisecond,
		Hooks: dlock.Hooks{Behind: func(_ context.Context, i dlock.BehindInfo) {
			if i.Lag >= 200*time.Millisecond {
				warned.CompareAndSwap(nil, &i)
			}
		}},
	})
	locks := holdMany(t, c, key(t), n, dlock.WithTTL(10*time.Second))
	// Every pipeline now takes 600ms: those waiting behind the first
	// round of pipelines wait longer than half the 400ms interval.
	stall.Set(600 * time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	warned.Store(nil) // only what the stall causes (a loaded machine may have been late before)
	deadline := time.Now().Add(8 * time.Second)
	for warned.Load() == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stall.Set(0)
	w := warned.Load()
	if w == nil {
		t.Fatal("no Behind warning while renewals waited")
	}
	if w.Held != n {
		t.Fatalf("Behind = %+v, want Held %d", *w, n)
	}
	if c.Stats().Behind == 0 {
		t.Fatal("Stats().Behind = 0")
	}
	for _, lk := range locks {
		if err := lk.Err(); err != nil {
			t.Fatalf("lost while only late: %v", err)
		}
	}
}

// Renewals sent on time whose replies come more than half an interval
// later (a starved process or server) warn too: no backlog of due
// renewals shows it, and the locks would be lost if it went on.
func TestWatchdogWarnsSlowReplies(t *testing.T) {
	const n = 100 // one pipeline: nothing waits to be sent
	rdb := srv.NewClient()
	stall := &redistest.PipelineDelay{}
	rdb.AddHook(stall)
	var warned atomic.Pointer[dlock.BehindInfo]
	c, _ := newClientOn(t, rdb, dlock.Options{
		RenewInterval: 400 * time.Millisecond,
		Hooks: dlock.Hooks{Behind: func(_ context.Context, i dlock.BehindInfo) {
			if i.Lag >= 200*time.Millisecond {
				warned.CompareAndSwap(nil, &i)
			}
		}},
	})
	locks := holdMany(t, c, key(t), n, dlock.WithTTL(10*time.Second))
	stall.Set(250 * time.Millisecond) // each reply 250ms late: more than half the interval
	time.Sleep(100 * time.Millisecond)
	warned.Store(nil)
	deadline := time.Now().Add(8 * time.Second)
	for warned.Load() == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stall.Set(0)
	w := warned.Load()
	if w == nil {
		t.Fatal("no Behind warning while replies came late")
	}
	if w.Held != n || w.Waiting == 0 {
		t.Fatalf("Behind = %+v, want Held %d and the batch's renewals", *w, n)
	}
	for _, lk := range locks {
		if err := lk.Err(); err != nil {
			t.Fatalf("lost while only late: %v", err)
		}
	}
}

// Taking and releasing locks one after another does not wake the
// watchdog each time: a new lock's renewal and deadline come after the
// time the loop already sleeps until (set by an earlier lock), so the
// loop finds it when it wakes then. (Each Lock woke the loop, a goroutine
// hand-off and a timer reset on every uncontended acquire.)
func TestLockDoesNotWakeWatchdog(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	ctx := t.Context()
	k := key(t)
	lk, err := c.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the first lock's kick is served
	before := dlock.WatchdogWakes(c)
	const n = 200
	for i := range n {
		lk, err := c.Lock(ctx, fmt.Sprintf("%s:%d", k, i))
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := dlock.WatchdogWakes(c) - before; got > n/10 {
		t.Fatalf("the watchdog loop woke %d times for %d locks taken and released in a row", got, n)
	}
}
