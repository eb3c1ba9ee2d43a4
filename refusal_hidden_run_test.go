package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/redis/go-redis/v9"
)

// clusterDown is the reply a Cluster node sends while the cluster is down.
type clusterDown struct{}

func (clusterDown) Error() string { return "CLUSTERDOWN The cluster is down" }
func (clusterDown) RedisError()   {}

// ranThenRefused makes the first call of a script named script run and
// answer CLUSTERDOWN, and refuses every later one (without running it)
// while refusing is set: what the caller sees when go-redis sent the call
// again on its own after a connection error that lost the first run's
// reply, to a cluster that went down meanwhile, and reported only the
// last try's reply.
type ranThenRefused struct {
	script   string
	ran      atomic.Bool
	refusing atomic.Bool
}

func (*ranThenRefused) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *ranThenRefused) matches(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	s, _ := args[1].(string)
	switch strings.ToLower(cmd.Name()) {
	case "evalsha", "fcall":
		return probe.ScriptName(s) == h.script
	case "eval":
		return probe.ScriptNameOfSource(s) == h.script
	}
	return false
}
func (h *ranThenRefused) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.refusing.Load() || !h.matches(cmd) {
			return next(ctx, cmd)
		}
		if !h.ran.Load() {
			if err := next(ctx, cmd); err != nil {
				return err // NOSCRIPT: the caller sends it again by EVAL
			}
			h.ran.Store(true)
		}
		cmd.SetErr(clusterDown{})
		return cmd.Err()
	}
}
func (h *ranThenRefused) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.refusing.Load() || !slices.ContainsFunc(cmds, h.matches) {
			return next(ctx, cmds)
		}
		if !h.ran.Load() {
			if err := next(ctx, cmds); err != nil {
				return err
			}
			h.ran.Store(true)
		}
		for _, cmd := range cmds {
			cmd.SetErr(clusterDown{})
		}
		return clusterDown{}
	}
}

// A call that ends on a refusal (after its retries, at its deadline) was
// not run by its last try, but may have been by an earlier one: go-redis
// sends a call again by itself after a connection error, and reports the
// last try's reply. An acquire that ran so must not leave the key held by
// a token nobody holds until its TTL, and a Counter take must not say
// that no units were taken.
func TestRefusalAfterAHiddenRunIsAmbiguous(t *testing.T) {
	t.Run("acquire", func(t *testing.T) {
		ctx := t.Context()
		hook := &ranThenRefused{script: "acquire"}
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		rdb.AddHook(hook)
		a, _ := newClientOn(t, rdb, dlock.Options{})
		_, plain := newClient(t, dlock.Options{})
		k := key(t)
		hook.refusing.Store(true)
		actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := a.TryLock(actx, k, dlock.WithTTL(time.Minute))
		cancel()
		hook.refusing.Store(false)
		if err == nil || !hook.ran.Load() {
			t.Fatalf("TryLock = %v, ran %v: want an error after the acquire ran", err, hook.ran.Load())
		}
		for end := time.Now().Add(10 * time.Second); plain.Exists(ctx, k).Val() != 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("the key stayed held (PTTL %v) by the token of a TryLock that failed: %v", plain.PTTL(ctx, k).Val(), err)
			}
		}
	})
	t.Run("counter take", func(t *testing.T) {
		ctx := t.Context()
		hook := &ranThenRefused{script: "counter_add"}
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		rdb.AddHook(hook)
		a, _ := newClientOn(t, rdb, dlock.Options{})
		ctr := a.Counter(key(t), 1)
		if err := ctr.Set(ctx, 10); err != nil {
			t.Fatal(err)
		}
		hook.refusing.Store(true)
		tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		seg, err := ctr.Take(tctx, 1, nil)
		cancel()
		hook.refusing.Store(false)
		if !hook.ran.Load() {
			t.Fatal("the take never ran")
		}
		total, terr := ctr.Total(ctx)
		if terr != nil || total != 9 {
			t.Fatalf("Total = %d, %v; want 9 (the hidden run took one)", total, terr)
		}
		if seg < 0 || !errors.Is(err, dlock.ErrMaybeApplied) {
			t.Fatalf("Take = %d, %v; want the segment and ErrMaybeApplied (a unit was taken)", seg, err)
		}
	})
}

// The refusal retry sends a call again once the refusals end, and the
// call may have run before (go-redis sent it by itself after a lost
// reply, then met the refusals): the second run must not apply it twice.
// A Counter's take (its operation id) takes once; a semaphore's acquire
// (its token) holds its permits once.
func TestRefusalRetryAfterAHiddenRunAppliesOnce(t *testing.T) {
	// refuseUntilRan refuses the hook's calls until a first one ran, and
	// 100ms more: the refusal retry then sends it again.
	refuseUntilRan := func(t *testing.T, hook *ranThenRefused) {
		hook.refusing.Store(true)
		go func() {
			for !hook.ran.Load() {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
			hook.refusing.Store(false)
		}()
		t.Cleanup(func() { hook.refusing.Store(false) })
	}
	t.Run("counter take", func(t *testing.T) {
		ctx := t.Context()
		hook := &ranThenRefused{script: "counter_add"}
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		rdb.AddHook(hook)
		a, _ := newClientOn(t, rdb, dlock.Options{})
		ctr := a.Counter(key(t), 1)
		if err := ctr.Set(ctx, 10); err != nil {
			t.Fatal(err)
		}
		refuseUntilRan(t, hook)
		if seg, err := ctr.Take(ctx, 1, nil); seg != 0 || err != nil {
			t.Fatalf("Take = %d, %v; want segment 0", seg, err)
		}
		if a.Stats().Refusals == 0 {
			t.Fatal("no try was refused")
		}
		if total, err := ctr.Total(ctx); err != nil || total != 9 {
			t.Fatalf("Total = %d, %v; want 9 (one unit taken, by two runs)", total, err)
		}
	})
	t.Run("semaphore acquire", func(t *testing.T) {
		ctx := t.Context()
		hook := &ranThenRefused{script: "semaphore_acquire"}
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		rdb.AddHook(hook)
		a, _ := newClientOn(t, rdb, dlock.Options{})
		b, _ := newClient(t, dlock.Options{})
		k := key(t)
		refuseUntilRan(t, hook)
		lk, err := a.Semaphore(k, 3).TryAcquire(ctx, 2, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("TryAcquire(2): %v", err)
		}
		if a.Stats().Refusals == 0 {
			t.Fatal("no try was refused")
		}
		one, err := b.Semaphore(k, 3).TryAcquire(ctx, 1)
		if err != nil {
			t.Fatalf("another TryAcquire(1) beside 2 of 3 permits: %v (the two runs held 4?)", err)
		}
		if _, err := b.Semaphore(k, 3).TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("a TryAcquire beyond the limit = %v, want ErrNotAcquired", err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := one.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
