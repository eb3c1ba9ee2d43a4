package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// slowLost is a Lost hook whose first call blocks for d, or until done is
// called (defer it, so the hook lets go before the Client closes).
type slowLost struct {
	d       time.Duration
	in      atomic.Bool // the first call has begun
	release chan struct{}
}

func newSlowLost(d time.Duration) *slowLost {
	return &slowLost{d: d, release: make(chan struct{})}
}

func (h *slowLost) lost(context.Context, dlock.LostInfo) {
	if h.in.CompareAndSwap(false, true) {
		select {
		case <-h.release:
		case <-time.After(h.d):
		}
	}
}

func (h *slowLost) done() { close(h.release) }

// A Lost hook that takes a while (it logs to a remote service, say) must
// not stop the Client's other locks from being renewed, nor its blocked
// calls' retries: the watchdog found the loss, and held up by the hook it
// renewed nothing, so every other lock expired in Redis while its holder
// still counted on it.
func TestSlowLostHookDelaysNothingElse(t *testing.T) {
	const hook = 1500 * time.Millisecond
	slow := newSlowLost(hook)
	c, rdb := newClient(t, dlock.Options{Hooks: dlock.Hooks{Lost: slow.lost}})
	defer slow.done()
	ctx := t.Context()
	other, err := c.Lock(ctx, key(t), dlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Unlock(ctx)
	short, err := c.Lock(ctx, key(t), dlock.WithTTL(50*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	for !slow.in.Load() {
		if time.Since(short.Deadline()) > 5*time.Second {
			t.Fatal("the short lock was never reported lost")
		}
		time.Sleep(time.Millisecond)
	}
	// The hook runs now, for up to 1.5 s: the other lock (renewed every
	// 200ms, 600ms TTL) must stay held meanwhile.
	stillHeldFor(t, rdb, other, hook-100*time.Millisecond)
}

// The same for a loss the watchdog's renewal batch finds: the other locks
// renewed in that batch must be renewed again on time while the hook runs.
func TestSlowLostHookInRenewalBatch(t *testing.T) {
	const hook = 1500 * time.Millisecond
	slow := newSlowLost(hook)
	c, rdb := newClient(t, dlock.Options{Hooks: dlock.Hooks{Lost: slow.lost}})
	defer slow.done()
	ctx := t.Context()
	const ttl = 600 * time.Millisecond
	other, err := c.Lock(ctx, key(t), dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Unlock(ctx)
	gone, err := c.Lock(ctx, key(t), dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, gone.Key()) // its next renewal finds it gone
	for !slow.in.Load() {
		if time.Since(gone.Deadline()) > 5*time.Second {
			t.Fatal("the deleted lock was never reported lost")
		}
		time.Sleep(time.Millisecond)
	}
	stillHeldFor(t, rdb, other, hook-100*time.Millisecond)
}

// A queued waiter keeps its place in the queue while a Lost hook of its
// Client runs: its lease refreshes (its retries, kept by the watchdog's
// loop) go on.
func TestSlowLostHookKeepsWaiterPlace(t *testing.T) {
	const hook = 2 * time.Second
	slow := newSlowLost(hook)
	opts := dlock.Options{WaiterLease: 900 * time.Millisecond}
	opts.Hooks.Lost = slow.lost
	c1, _ := newClient(t, opts)
	defer slow.done()
	c0, rdb := newClient(t, dlock.Options{})
	c2, _ := newClient(t, dlock.Options{WaiterLease: 900 * time.Millisecond})
	ctx := t.Context()
	k := key(t)
	holder, err := c0.Lock(ctx, k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 2)
	lockAs := func(c *dlock.Client, name string) {
		lk, err := c.Lock(ctx, k)
		if err != nil {
			t.Error(err)
			got <- "error"
			return
		}
		got <- name
		time.Sleep(50 * time.Millisecond)
		_ = lk.Unlock(ctx)
	}
	go lockAs(c1, "first")
	waitQueued(t, rdb, k, 1)
	go lockAs(c2, "second")
	waitQueued(t, rdb, k, 2)
	short, err := c1.Lock(ctx, key(t), dlock.WithTTL(50*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	for !slow.in.Load() {
		if time.Since(short.Deadline()) > 5*time.Second {
			t.Fatal("the short lock was never reported lost")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(hook - 300*time.Millisecond) // two of the first waiter's leases
	if testing.Verbose() {
		ks := adminOf(t, c0).KeysFor(k)
		ids := rdb.LRange(ctx, ks.Queue, 0, -1).Val()
		for _, id := range ids {
			t.Logf("queued %s: lease %q inHook %v lost %d", id[:8], rdb.HGet(ctx, ks.Waiters, id).Val(), slow.in.Load(), c1.Stats().Lost)
		}
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if a, b := <-got, <-got; a != "first" || b != "second" {
		t.Fatalf("granted %s then %s: the first waiter lost its place while a Lost hook ran", a, b)
	}
}

// Many locks lost at once with a slow Lost hook: their reports run on a
// bounded number of goroutines, not one per lock.
func TestManyLossesBoundedGoroutines(t *testing.T) {
	const n = 600
	var peak atomic.Int64
	var calls atomic.Int64
	release := make(chan struct{})
	c, _ := newClient(t, dlock.Options{Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) {
		calls.Add(1)
		if g := int64(runtime.NumGoroutine()); g > peak.Load() {
			peak.Store(g) // racy max: good enough for an order of magnitude
		}
		select {
		case <-release:
		case <-time.After(300 * time.Millisecond):
		}
	}}})
	defer close(release)
	base := runtime.NumGoroutine()
	locks := holdMany(t, c, key(t), n, dlock.WithTTL(1500*time.Millisecond), dlock.WithoutRenewal())
	for _, lk := range locks {
		<-lk.Done()
	}
	// Done closes as a loss is found; its Lost hook runs after.
	waitFor(t, "every Lost hook", func() bool { return calls.Load() >= n })
	if calls.Load() != n {
		t.Fatalf("%d Lost calls, want %d", calls.Load(), n)
	}
	if p := peak.Load(); p > int64(base)+200 {
		t.Fatalf("%d goroutines while %d losses were reported (%d before)", p, n, base)
	}
	t.Logf("peak %d goroutines (%d before)", peak.Load(), base)
}

// bounded runs f on a goroutine of its own and waits for it at most d:
// ok is false if it had not returned by then (a deadlock shows as a
// timeout, and unwinds once the caller returns).
func bounded(d time.Duration, f func() error) (err error, ok bool) {
	res := make(chan error, 1)
	go func() { res <- f() }()
	select {
	case err := <-res:
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

// A Lost hook may call back into the Client: Unlock the lock it reports
// lost (which returns the loss), and take and release another lock,
// whichever call found the loss: the watchdog's renewal (the key deleted
// or taken), an Unlock or an Extend. The Client held the lock's op mutex
// while reporting, and the hook's Unlock waited for it forever.
func TestLostHookCallsBack(t *testing.T) {
	const bound = 2 * time.Second
	for _, tc := range []struct {
		name  string
		cause error
		// lose makes the Client find lk lost and returns the error of the
		// call that found it (nil for the watchdog).
		lose func(ctx context.Context, rdb *redis.Client, lk *dlock.Lock) error
	}{
		{"renewal/deleted", dlock.ErrExpired, func(ctx context.Context, rdb *redis.Client, lk *dlock.Lock) error {
			return rdb.Del(ctx, lk.Key()).Err()
		}},
		{"renewal/taken", dlock.ErrTaken, func(ctx context.Context, rdb *redis.Client, lk *dlock.Lock) error {
			return rdb.Set(ctx, lk.Key(), "thief", time.Minute).Err()
		}},
		{"unlock", dlock.ErrExpired, func(ctx context.Context, rdb *redis.Client, lk *dlock.Lock) error {
			rdb.Del(ctx, lk.Key())
			return lk.Unlock(ctx)
		}},
		{"extend", dlock.ErrExpired, func(ctx context.Context, rdb *redis.Client, lk *dlock.Lock) error {
			rdb.Del(ctx, lk.Key())
			return lk.Extend(ctx, time.Minute)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				target   atomic.Pointer[dlock.Lock]
				mu       sync.Mutex
				events   []string // lost, lost-end, release
				problems []string
				lost     = make(chan struct{})
			)
			note := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
			fail := func(format string, args ...any) {
				mu.Lock()
				problems = append(problems, fmt.Sprintf(format, args...))
				mu.Unlock()
			}
			var c *dlock.Client
			other := key(t)
			hooks := dlock.Hooks{
				Lost: func(ctx context.Context, i dlock.LostInfo) {
					lk := target.Load()
					if lk == nil || i.Key != lk.Key() {
						return
					}
					note("lost")
					defer close(lost)
					defer note("lost-end")
					if !errors.Is(i.Cause, tc.cause) {
						fail("LostInfo.Cause %v, want %v", i.Cause, tc.cause)
					}
					select {
					case <-lk.Done():
					default:
						fail("Done still open when Lost ran: it closes as soon as the loss is known")
					}
					err, ok := bounded(bound, func() error { return lk.Unlock(ctx) })
					switch {
					case !ok:
						fail("Unlock of the lost lock from its Lost hook did not return within %v", bound)
					case !errors.Is(err, dlock.ErrLost) || !errors.Is(err, tc.cause):
						fail("Unlock of the lost lock from its Lost hook: %v, want the loss", err)
					}
					err, ok = bounded(bound, func() error {
						lk2, err := c.Lock(ctx, other, dlock.WithTTL(time.Minute))
						if err != nil {
							return err
						}
						return lk2.Unlock(ctx)
					})
					if !ok || err != nil {
						fail("Lock and Unlock of another key from a Lost hook: returned %v, err %v", ok, err)
					}
				},
				Release: func(ctx context.Context, i dlock.ReleaseInfo) {
					if lk := target.Load(); lk != nil && i.Key == lk.Key() {
						note("release")
						if !errors.Is(i.Err, dlock.ErrLost) {
							fail("ReleaseInfo.Err %v, want the loss", i.Err)
						}
					}
				},
			}
			c, rdb := newClient(t, dlock.Options{Hooks: hooks})
			ctx := t.Context()
			lk, err := c.Lock(ctx, key(t), dlock.WithTTL(600*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			target.Store(lk)
			err, ok := bounded(3*bound, func() error { return tc.lose(ctx, rdb, lk) })
			if !ok {
				t.Fatalf("the call that found the loss did not return within %v", 3*bound)
			}
			if strings.HasPrefix(tc.name, "renewal") {
				if err != nil {
					t.Fatal(err)
				}
			} else if !errors.Is(err, dlock.ErrLost) || !errors.Is(err, tc.cause) {
				t.Errorf("%s of a deleted lock: %v, want the loss", tc.name, err)
			}
			select {
			case <-lost:
			case <-time.After(3 * bound):
				t.Fatal("the loss was not reported")
			}
			if err := waitDone(t, lk, bound); !errors.Is(err, tc.cause) {
				t.Errorf("Err after the loss: %v", err)
			}
			if err := lk.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
				t.Errorf("Unlock after the loss: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, p := range problems {
				t.Error(p)
			}
			// One Lost, one Release (with the loss). A loss Unlock found
			// is reported by Lost before Unlock's Release; otherwise the
			// hook's Unlock reported the release.
			want := "[lost release lost-end]"
			if tc.name == "unlock" {
				want = "[lost lost-end release]"
			}
			if got := fmt.Sprint(events); got != want {
				t.Errorf("hook events %s, want %s", got, want)
			}
			if n := c.Stats().Lost; n != 1 {
				t.Errorf("Stats().Lost = %d, want 1", n)
			}
		})
	}
}

// A slow Renew hook (40 ms a call) with 2,000 locks renewed every 400 ms:
// the Client called it inside each renewal batch, so its 8 pipelines
// renewed 200 locks a second, a round took 10 s, and every lock expired.
// Its calls are now made off the renewal path, and none is lost.
func TestSlowRenewHookLosesNothing(t *testing.T) {
	const n = 2000
	var calls atomic.Int64
	c, rdb := newClient(t, dlock.Options{RenewInterval: hookRenewEvery, Hooks: dlock.Hooks{Renew: func(context.Context, dlock.RenewInfo) {
		calls.Add(1)
		time.Sleep(40 * time.Millisecond)
	}}})
	// The TTL outlasts a loaded machine's stalls; a hook on the renewal
	// path would still take 2.5 times longer than it to renew them all.
	locks := holdMany(t, c, key(t), n, dlock.WithTTL(hookTTL))
	for end := time.Now().Add(2 * hookTTL); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if lost := c.Stats().Lost; lost != 0 {
			t.Fatalf("%d of %d locks lost with a slow Renew hook (%d hook calls)", lost, n, calls.Load())
		}
	}
	for _, lk := range locks {
		if err := lk.Err(); err != nil {
			t.Fatalf("%s: %v", lk.Key(), err)
		}
	}
	// Spot-check Redis: the keys are still ours.
	for _, lk := range locks[:50] {
		if v, _ := rdb.Get(t.Context(), lk.Key()).Result(); v != lk.Token() {
			t.Fatalf("%s holds %q, not the lock's token (Err %v; %+v)", lk.Key(), v, lk.Err(), c.Stats())
		}
	}
	st := c.Stats()
	if calls.Load() == 0 {
		t.Fatal("the Renew hook was never called")
	}
	t.Logf("%d renewals, %d Renew hook calls, %d reports dropped", st.Renewals, calls.Load(), st.RenewReportsDropped)
}

// hookTTL and hookRenewEvery are the locks of the Renew hook tests: renewed
// as often as with a TTL of 1.2 s, but with a TTL that outlasts the stalls
// of a race-detector build on a loaded 2-core machine (seconds at load 20),
// which lost locks to the machine, not to the hook.
const (
	hookTTL        = 4 * time.Second
	hookRenewEvery = 400 * time.Millisecond
)

// A Renew hook that blocks: the reports waiting for it stay bounded (the
// oldest are dropped and counted), and no lock is lost.
func TestBlockedRenewHookDropsReports(t *testing.T) {
	const n = 2000
	release := make(chan struct{})
	var calls atomic.Int64
	c, _ := newClient(t, dlock.Options{RenewInterval: hookRenewEvery, Hooks: dlock.Hooks{Renew: func(context.Context, dlock.RenewInfo) {
		calls.Add(1)
		<-release
	}}})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	holdMany(t, c, key(t), n, dlock.WithTTL(hookTTL))
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().RenewReportsDropped == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no report dropped with the hook blocked: %+v", c.Stats())
		}
		if lost := c.Stats().Lost; lost != 0 {
			t.Fatalf("%d locks lost with the Renew hook blocked", lost)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := calls.Load(); got > 64 {
		t.Errorf("%d Renew hook calls at once, want at most 64", got)
	}
	time.Sleep(500 * time.Millisecond) // more renewals, the queue full
	if lost := c.Stats().Lost; lost != 0 {
		t.Fatalf("%d locks lost with the Renew hook blocked", lost)
	}
	unblock()
	// The backlog drains: the hook is called for what was kept.
	before := calls.Load()
	deadline = time.Now().Add(5 * time.Second)
	for calls.Load() < before+1000 {
		if time.Now().After(deadline) {
			t.Fatalf("the Renew hook was called %d times after it unblocked", calls.Load()-before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%+v", c.Stats())
}

// A leader's Lost hook may call back into its Leadership (Value, Resign),
// whether Proclaim or the leader's refresher found the loss: both held
// the Leadership's mutex while reporting it.
func TestLostHookCallsLeadership(t *testing.T) {
	const bound = 2 * time.Second
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		lose func(ctx context.Context, ld *dlock.Leadership) error
	}{
		{"proclaim", time.Minute, func(ctx context.Context, ld *dlock.Leadership) error {
			return ld.Proclaim(ctx, "next")
		}},
		{"refresh", 600 * time.Millisecond, func(context.Context, *dlock.Leadership) error { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var leader atomic.Pointer[dlock.Leadership]
			res := make(chan string, 1)
			c, rdb := newClient(t, dlock.Options{Hooks: dlock.Hooks{Lost: func(ctx context.Context, i dlock.LostInfo) {
				ld := leader.Load()
				if ld == nil || i.Key != ld.Lock().Key() {
					return
				}
				err, ok := bounded(bound, func() error {
					_ = ld.Value() // "a", or the value Proclaim tried
					return ld.Resign(ctx)
				})
				switch {
				case !ok:
					res <- fmt.Sprintf("Value and Resign from the Lost hook did not return within %v", bound)
				case !errors.Is(err, dlock.ErrLost):
					res <- fmt.Sprintf("Resign from the Lost hook: %v, want the loss", err)
				default:
					res <- ""
				}
			}}})
			e := newElection(t, c, key(t), dlock.ElectionOptions{TTL: tc.ttl})
			ctx := t.Context()
			ld, err := e.Campaign(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			leader.Store(ld)
			rdb.Del(ctx, ld.Lock().Key())
			err, ok := bounded(3*bound, func() error { return tc.lose(ctx, ld) })
			if !ok {
				t.Fatalf("%s did not return within %v", tc.name, 3*bound)
			}
			if tc.name == "proclaim" && !errors.Is(err, dlock.ErrLost) {
				t.Errorf("Proclaim after the loss: %v", err)
			}
			select {
			case msg := <-res:
				if msg != "" {
					t.Error(msg)
				}
			case <-time.After(3 * bound):
				t.Fatal("the loss was not reported")
			}
			if err := waitDone(t, ld.Lock(), bound); !errors.Is(err, dlock.ErrLost) {
				t.Errorf("Err after the loss: %v", err)
			}
		})
	}
}

// stillHeldFor checks, every 50ms for d, that lk believes it holds its key
// and that the key holds its token (a Lost hook of another lock runs
// meanwhile).
func stillHeldFor(t *testing.T, rdb redis.UniversalClient, lk *dlock.Lock, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if err := lk.Err(); err != nil {
			t.Fatalf("the other lock was lost while a Lost hook ran: %v", err)
		}
		if v, _ := rdb.Get(t.Context(), lk.Key()).Result(); v != lk.Token() {
			t.Fatalf("the other lock's key holds %q while it believes it holds it", v)
		}
	}
}
