package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/redis/go-redis/v9"
)

// Regression tests for lost, late and reordered replies and paused engine
// goroutines, with the command-level fault layer (internal/faultcmd) on
// the Client's own connections and the engine's pause points
// (internal/probe).

// faultyClient returns a Client whose go-redis client carries a fresh
// Injector; the Injector's log is printed when the test fails.
func faultyClient(t *testing.T, opts dlock.Options) (*dlock.Client, *faultcmd.Injector) {
	t.Helper()
	rdb := srv.NewClient()
	inj := faultcmd.New()
	rdb.AddHook(inj)
	c, _ := newClientOn(t, rdb, opts)
	t.Cleanup(func() {
		if t.Failed() {
			for _, e := range inj.Log() {
				t.Log("fault:", e)
			}
		}
	})
	return c, inj
}

// waitLate waits until a Late command of inj has been sent.
func waitLate(t *testing.T, inj *faultcmd.Injector) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		for _, e := range inj.Log() {
			if e.Action == faultcmd.Late && strings.HasPrefix(e.Outcome, "sent") {
				return
			}
		}
	}
	t.Fatal("the late command never landed")
}

// oneSend is the ReleaseTimeout of a Client whose Unlock sends its release
// once: Unlock sends a release that failed on a connection error again
// for up to ReleaseTimeout, and the tests with it are about what the
// caller's own retried Unlock reports.
const oneSend = time.Nanosecond

// slowRetry makes queued waiters retry on their own only after a long
// time, so the attempts a test sees are the ones it causes.
var slowRetry = dlock.Options{RetryInterval: time.Minute, WaiterLease: 3 * time.Minute}

// await waits for ch, at most 20 s.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// queued waits until c has a blocked Lock call (its first attempt queued it).
func queued(t *testing.T, c *dlock.Client) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for c.Stats().Waiting == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
		time.Sleep(time.Millisecond)
	}
}

// stillHeld checks, for a while, that lk's key holds lk's token and that
// nobody else can take it, as long as lk believes it holds it.
func stillHeld(t *testing.T, rdb *redis.Client, other *dlock.Client, lk *dlock.Lock) {
	t.Helper()
	ctx := context.Background()
	for range 20 {
		if lk.Err() != nil || time.Now().After(lk.Deadline()) {
			t.Fatalf("the lock ended: %v", lk.Err())
		}
		v, _ := rdb.Get(ctx, lk.Key()).Result()
		if v != lk.Token() {
			t.Fatalf("the key holds %q, but the lock (token %q) believes it holds it until %v: two holders possible",
				v, lk.Token(), time.Until(lk.Deadline()).Round(time.Millisecond))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if o, err := other.TryLock(ctx, lk.Key()); err == nil {
		_ = o.Unlock(ctx)
		t.Fatal("a second owner got the lock while the first holds it")
	}
}

// A hand-off's confirmation ran but its reply was lost; the withdrawal of
// that token reaches Redis after the waiter's retry. The retry must not
// be granted with the given-up token (the withdrawal would then free the
// key under a holder who believes it holds it).
func TestWithdrawnTokenNeverGrantedAgain(t *testing.T) {
	a, inj := faultyClient(t, slowRetry)
	b, rdb := newClient(t, dlock.Options{})
	k := key(t)
	held, err := b.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lk  *dlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		lk, err := a.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
		got <- result{lk, err}
	}()
	queued(t, a)
	// A's next acquire is the confirmation of the hand-off: it runs, its
	// reply is lost. A's withdrawal of that token is held until A's retry
	// has completed.
	inj.Add(faultcmd.Rule{Name: "lost confirm", Action: faultcmd.DropReply, Match: faultcmd.Match{Script: "acquire", Key: k}})
	hold := inj.Add(faultcmd.Rule{Name: "withdraw after the retry", Action: faultcmd.Hold,
		Match: faultcmd.Match{Script: "release", Key: k},
		Until: faultcmd.Match{Script: "acquire", Key: k}})
	if err := held.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.lk.Unlock(context.Background())
	await(t, hold.FiredC(), "the withdrawal")
	stillHeld(t, rdb, b, r.lk)
}

// The same interleaving as the soak's two holders under CPU load: the
// background withdrawal after a lost reply is scheduled late (a starved
// goroutine: the BeforeWithdraw pause point), after the waiter's retry.
func TestSlowWithdrawAfterLostReplyKeepsOneHolder(t *testing.T) {
	a, inj := faultyClient(t, slowRetry)
	b, rdb := newClient(t, dlock.Options{})
	k := key(t)
	held, err := b.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lockReturned := make(chan struct{})
	var paused atomic.Int32
	defer probe.Set(func(name, key string) {
		if name == probe.BeforeWithdraw && key == k {
			paused.Add(1)
			// The starved goroutine runs once the Lock call returned (or
			// after a while: with a fresh token the retry queues behind
			// the withdrawn one, which only this withdrawal hands on).
			select {
			case <-lockReturned:
			case <-time.After(time.Second):
			}
		}
	})()
	type result struct {
		lk  *dlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		lk, err := a.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
		close(lockReturned)
		got <- result{lk, err}
	}()
	queued(t, a)
	inj.Add(faultcmd.Rule{Name: "lost confirm", Action: faultcmd.DropReply, Match: faultcmd.Match{Script: "acquire", Key: k}})
	if err := held.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.lk.Unlock(context.Background())
	if paused.Load() == 0 {
		t.Fatal("no withdrawal ran")
	}
	time.Sleep(50 * time.Millisecond) // the released withdrawal lands
	stillHeld(t, rdb, b, r.lk)
}

// An acquire delayed (not lost) past its clean-up must not leave the lock
// held by nobody: whatever kind of lock, another caller gets it at once.
func TestLateAcquireAfterCleanupHoldsNothing(t *testing.T) {
	kinds := []struct {
		name  string
		kind  primitive
		other primitive // what another caller then takes
	}{
		{"exclusive", nil, nil},
		{"reentrant", reentrant("job-a"), reentrant("job-b")},
		{"shared", readers(), nil},
		{"semaphore", permits(1, 1), permits(1, 1)},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			a, inj := faultyClient(t, dlock.Options{})
			b, _ := newClient(t, dlock.Options{})
			k := key(t)
			// Load the kind's scripts: a late EVALSHA must find its script.
			for _, kind := range []primitive{kind.kind, kind.other} {
				if lk, err := kind.TryLock(t.Context(), b, key(t)); err != nil {
					t.Fatal(err)
				} else {
					_ = lk.Unlock(t.Context())
				}
			}
			isRelease := func(c faultcmd.Command) bool { return strings.Contains(c.Script, "release") }
			late := inj.Add(faultcmd.Rule{Name: "acquire lands after its clean-up", Action: faultcmd.Late,
				Match: faultcmd.Match{Key: k, Func: func(c faultcmd.Command) bool { return strings.Contains(c.Script, "acquire") }},
				Until: faultcmd.Match{Key: k, Func: isRelease}})
			_, err := kind.kind.TryLock(t.Context(), a, k, dlock.WithTTL(time.Minute))
			if !errors.Is(err, dlock.ErrUnavailable) {
				t.Fatalf("TryLock = %v, want ErrUnavailable (lost reply)", err)
			}
			await(t, late.FiredC(), "the late acquire")
			// Wait until the late acquire has landed (its second log entry).
			deadline := time.Now().Add(20 * time.Second)
			for n := 0; n < 2; {
				n = 0
				for _, e := range inj.Log() {
					if e.Action == faultcmd.Late {
						n++
						if strings.Contains(e.Outcome, "NOSCRIPT") {
							t.Fatal("the late acquire did not run: NOSCRIPT")
						}
					}
				}
				if time.Now().After(deadline) {
					t.Fatal("the late acquire never landed")
				}
				time.Sleep(time.Millisecond)
			}
			lk, err := kind.other.TryLock(t.Context(), b, k, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatalf("after the clean-up and the late acquire, another caller: %v", err)
			}
			_ = lk.Unlock(t.Context())
		})
	}
}

// A retried Unlock after a lost reply, when the first release ran and
// handed the key to a waiter, is a release, not a loss.
func TestRetriedUnlockAfterLostReplyIsNotALoss(t *testing.T) {
	var lost atomic.Int32
	a, inj := faultyClient(t, dlock.Options{ReleaseTimeout: oneSend, Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) { lost.Add(1) }}})
	b, _ := newClient(t, dlock.Options{})
	k := key(t)
	lk, err := a.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := b.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
		if err == nil {
			defer w.Unlock(context.Background())
		}
		got <- err
	}()
	queued(t, b)
	inj.Add(faultcmd.Rule{Name: "lost release reply", Action: faultcmd.DropReply, Match: faultcmd.Match{Script: "release", Key: k}})
	if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("first Unlock = %v, want ErrUnavailable", err)
	}
	if err := <-got; err != nil { // the release ran: the waiter has the key
		t.Fatal(err)
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatalf("retried Unlock = %v, want nil: the release happened", err)
	}
	if !errors.Is(lk.Err(), dlock.ErrReleased) || lost.Load() != 0 {
		t.Fatalf("Err = %v, Lost hook calls %d: want ErrReleased and none", lk.Err(), lost.Load())
	}
}

// A multi-key acquire across slots whose second slot's reply was lost,
// and whose roll-back then failed with a Redis error reply, leaves nothing
// held: the ambiguity is judged on the acquire error alone.
func TestMultiSlotRollbackFailureCleansUp(t *testing.T) {
	a, inj := faultyClient(t, dlock.Options{})
	dlock.SplitSlots(a)
	b, _ := newClient(t, dlock.Options{})
	dlock.SplitSlots(b)
	k := key(t)
	keys := []string{k + ":a", k + ":b", k + ":c"}
	if admin.Slot(keys[0]) == admin.Slot(keys[1]) && admin.Slot(keys[1]) == admin.Slot(keys[2]) {
		t.Skip("keys share a slot")
	}
	inj.Add(faultcmd.Rule{Name: "lost reply of the second slot", Action: faultcmd.DropReply,
		Match: faultcmd.Match{Script: "multi_acquire"}, Nth: 2})
	inj.Add(faultcmd.Rule{Name: "roll-back refused", Action: faultcmd.FailBefore,
		Match: faultcmd.Match{Script: "multi_release"}, Err: readOnlyError{}})
	_, err := a.TryLockMulti(t.Context(), keys, dlock.WithTTL(time.Minute))
	if err == nil {
		t.Fatal("TryLockMulti succeeded through a lost reply")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		lk, err := b.TryLockMulti(t.Context(), keys, dlock.WithTTL(time.Minute))
		if err == nil {
			_ = lk.Unlock(t.Context())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys still held by nobody after the failed multi-key acquire: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readOnlyError is a Redis error reply, as a replica answers a write.
type readOnlyError struct{}

func (readOnlyError) Error() string { return "READONLY You can't write against a read only replica." }
func (readOnlyError) RedisError()   {}

// A grant given back for want of replica acknowledgements, whose give-back
// failed, is withdrawn again: the key is not left held by nobody.
func TestReplicaAckGiveBackFailureCleansUp(t *testing.T) {
	a, inj := faultyClient(t, dlock.Options{MinReplicas: 1, ReplicaTimeout: 20 * time.Millisecond})
	b, _ := newClient(t, dlock.Options{})
	k := key(t)
	inj.Add(faultcmd.Rule{Name: "give-back refused", Action: faultcmd.FailBefore,
		Match: faultcmd.Match{Script: "release", Key: k}, Err: readOnlyError{}})
	if _, err := a.TryLock(t.Context(), k, dlock.WithTTL(time.Minute)); !errors.Is(err, dlock.ErrReplicaAck) {
		t.Fatalf("TryLock = %v, want ErrReplicaAck (the server has no replica)", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		lk, err := b.TryLock(t.Context(), k)
		if err == nil {
			_ = lk.Unlock(t.Context())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key is still held by nobody: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An acquire whose reply was lost, whose first withdrawal failed too (Redis
// unreachable for a moment), is withdrawn by a retry: nothing is left held
// by nobody for the TTL.
func TestFailedWithdrawIsRetried(t *testing.T) {
	a, inj := faultyClient(t, dlock.Options{})
	b, _ := newClient(t, dlock.Options{})
	k := key(t)
	inj.Add(faultcmd.Rule{Name: "lost grant", Action: faultcmd.DropReply, Match: faultcmd.Match{Script: "acquire", Key: k}})
	inj.Add(faultcmd.Rule{Name: "withdrawal fails", Action: faultcmd.FailBefore, Times: 2,
		Match: faultcmd.Match{Script: "release", Key: k}, Err: errors.New("dial tcp: connection refused")})
	if _, err := a.TryLock(t.Context(), k, dlock.WithTTL(time.Minute)); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryLock = %v, want ErrUnavailable (lost reply)", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		lk, err := b.TryLock(t.Context(), k)
		if err == nil {
			_ = lk.Unlock(t.Context())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key is still held by nobody: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLockWithDoneContextWritesNothing: Lock calls whose ctx is already
// done, on a Client that listens for hand-offs, send nothing for their
// token, so they leave no withdrawal tombstone behind.
func TestLockWithDoneContextWritesNothing(t *testing.T) {
	a, inj := faultyClient(t, slowRetry)
	b, rdb := newClient(t, dlock.Options{})
	k := key(t)
	held, err := b.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// Make a subscribe its hand-off channel: one queued wait that times out.
	ctx1, cancel1 := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, _ = a.Lock(ctx1, k)
	cancel1()
	_ = held.Unlock(t.Context())
	time.Sleep(200 * time.Millisecond)
	rel := inj.Add(faultcmd.Rule{Name: "count releases", Action: faultcmd.Delay, Delay: time.Millisecond, Match: faultcmd.Match{Script: "release", Key: k}})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for range 5 {
		if _, err := a.Lock(ctx, k); err == nil {
			t.Fatal("Lock with a done ctx succeeded")
		}
	}
	time.Sleep(300 * time.Millisecond)
	keys, _ := rdb.Keys(t.Context(), "*"+k+"*").Result()
	n := 0
	for _, x := range keys {
		if v, _ := rdb.Get(t.Context(), x).Result(); v == "~" {
			n++
		}
	}
	t.Logf("release scripts sent by 5 Lock calls with a done ctx: %d; tombstones in db: %d", rel.Fired(), n)
	// 2 expected: b's release and a's timed-out wait.
	if n > 2 {
		t.Errorf("%d tombstones: Lock calls with an already-done ctx each wrote a withdrawal of a token never sent", n-2)
	}
}

// TestUnlockAfterLateReleaseReplyStaysReleased: an Unlock whose release ran
// while the key was ours but whose reply came after the deadline returns
// nil; Unlock again also returns nil, and no Release hook reports a loss.
func TestUnlockAfterLateReleaseReplyStaysReleased(t *testing.T) {
	var mu sync.Mutex
	var rel []error
	opts := dlock.Options{DriftFactor: 0.2}
	opts.Hooks.Release = func(_ context.Context, ri dlock.ReleaseInfo) {
		mu.Lock()
		rel = append(rel, ri.Err)
		mu.Unlock()
	}
	a, inj := faultyClient(t, opts)
	k := key(t)
	lk, err := a.Lock(t.Context(), k, dlock.WithTTL(time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	d := time.Until(lk.Deadline()) + 60*time.Millisecond
	inj.Add(faultcmd.Rule{Action: faultcmd.Delay, Delay: d, Match: faultcmd.Match{Script: "release", Key: k}})
	err1 := lk.Unlock(t.Context())
	err2 := lk.Unlock(t.Context())
	mu.Lock()
	defer mu.Unlock()
	if err1 != nil || err2 != nil {
		t.Fatalf("Unlock #1 = %v, Unlock #2 = %v; want nil, nil (the release ran)", err1, err2)
	}
	for _, e := range rel {
		if e != nil {
			t.Fatalf("a Release hook reported %v for a release that ran", e)
		}
	}
}

// A waiter's first attempt behind a held key (it joins the queue) whose
// reply is lost after it ran, or which lands late, after the engine
// withdrew its token: the token never stays in the queue as a live
// waiter, so the holder's release frees the key instead of handing it to
// a waiter nobody is.
func TestLostOrLateJoinLeavesNoGhostWaiter(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule func(join, withdrawal faultcmd.Match) faultcmd.Rule
	}{
		{"reply lost", func(join, _ faultcmd.Match) faultcmd.Rule {
			return faultcmd.Rule{Name: "lost join", Action: faultcmd.DropReply, Match: join}
		}},
		{"lands after the withdrawal", func(join, withdrawal faultcmd.Match) faultcmd.Rule {
			return faultcmd.Rule{Name: "late join", Action: faultcmd.Late, Match: join, Until: withdrawal}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			a, inj := faultyClient(t, slowRetry)
			b, rdb := newClient(t, dlock.Options{})
			// Subscribe a's hand-off channel (queue once behind a holder):
			// from then on a Lock's first attempt joins the queue.
			k2 := key(t)
			h2, err := b.Lock(ctx, k2)
			if err != nil {
				t.Fatal(err)
			}
			sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err = a.Lock(sctx, k2)
			cancel()
			if !errors.Is(err, dlock.ErrContextDone) || !dlock.OwnSubscribed(a) {
				t.Fatalf("queueing behind a holder: %v (subscribed %v)", err, dlock.OwnSubscribed(a))
			}
			_ = h2.Unlock(ctx)

			k := key(t)
			held, err := b.Lock(ctx, k, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			// The join's token (an acquire's ARGV[1]), and its withdrawal:
			// a release of that token (ARGV[1]). After a lost reply the
			// engine also withdraws the fresh token it moves on to, so
			// "a release of k" is not enough.
			var joinToken atomic.Value
			join := faultcmd.Match{Script: "acquire", Key: k, Func: func(c faultcmd.Command) bool {
				joinToken.CompareAndSwap(nil, fmt.Sprint(c.Args[6]))
				return true
			}}
			withdrawal := faultcmd.Match{Script: "release", Key: k, Func: func(c faultcmd.Command) bool {
				return fmt.Sprint(c.Args[5]) == joinToken.Load()
			}}
			withdrawn := inj.Add(faultcmd.Rule{Name: "the withdrawal", Action: faultcmd.Observe, Match: withdrawal})
			fault := inj.Add(tc.rule(join, withdrawal))
			wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
			defer wcancel()
			if _, err := a.Lock(wctx, k); !errors.Is(err, dlock.ErrUnavailable) {
				t.Fatalf("Lock = %v, want ErrUnavailable (the join's reply never came)", err)
			}
			await(t, fault.FiredC(), "the join's fault")
			// Its effect, not its sending: read the queue once its reply came.
			await(t, withdrawn.DoneC(), "the withdrawal's reply")
			ks := adminOf(t, a).KeysFor(k)
			deadline := time.Now().Add(20 * time.Second)
			for {
				// The late join has landed once the log has both its entries.
				n := 0
				for _, e := range inj.Log() {
					if e.Action == faultcmd.Late {
						n++
					}
				}
				if tc.name == "reply lost" || n >= 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the late join never landed")
				}
				time.Sleep(time.Millisecond)
			}
			// The engine's other withdrawals (of the fresh token a lost
			// reply moves the Lock on to) run in the background: a ghost
			// left by the late join stays for its lease (3 minutes), so
			// the queue must be free of live waiters within seconds.
			deadline = time.Now().Add(10 * time.Second)
			for {
				ghost := ""
				for _, m := range rdb.LRange(ctx, ks.Queue, 0, -1).Val() {
					if v, err := rdb.HGet(ctx, ks.Waiters, m).Result(); err == nil {
						ghost = fmt.Sprintf("%q with the lease %q", m, v)
					}
				}
				if ghost == "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("withdrawn waiter %s is still queued 10 s after the withdrawals", ghost)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := held.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if v, err := rdb.Get(ctx, k).Result(); err == nil {
				t.Fatalf("the release handed the key to %q: a waiter nobody is", v)
			}
		})
	}
}
