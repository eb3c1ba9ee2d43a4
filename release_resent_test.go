package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/probe"
)

// resendReleases runs every release script twice and returns the second
// reply: what go-redis does on its own (MaxRetries) when a connection
// breaks after a command was written and ran, so the library never sees
// that the first run happened.
type resendReleases struct {
	resent    atomic.Int64
	match     func(cmd string) bool // script name, or command name; nil: "*release"
	pipelines bool                  // also send twice a pipeline with a matching command
}

func (*resendReleases) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *resendReleases) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	if !h.pipelines {
		return next
	}
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, h.matches) {
			if err := next(ctx, cmds); err != nil {
				return err
			}
			h.resent.Add(1)
			for _, cmd := range cmds {
				cmd.SetErr(nil)
			}
		}
		return next(ctx, cmds)
	}
}

// matches reports whether cmd is one the hook sends twice.
func (h *resendReleases) matches(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	name := ""
	if s, ok := args[1].(string); ok {
		switch strings.ToLower(cmd.Name()) {
		case "evalsha", "fcall":
			name = probe.ScriptName(s)
		case "eval":
			name = probe.ScriptNameOfSource(s)
		}
	}
	if name == "" {
		name = strings.ToLower(cmd.Name())
	}
	return (h.match == nil && strings.HasSuffix(name, "release")) || (h.match != nil && h.match(name))
}

func (h *resendReleases) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.matches(cmd) {
			if err := next(ctx, cmd); err != nil {
				return err
			}
			h.resent.Add(1)
			cmd.SetErr(nil)
		}
		return next(ctx, cmd)
	}
}

// TestReleaseResentByRedisClientIsNotALoss: a release that ran, lost its
// reply to a broken connection and was sent again by go-redis itself
// (invisible to dlock) must end the lock as released, not lost — for every
// kind of lock, also when the first run handed the key to a waiter.
func TestReleaseResentByRedisClientIsNotALoss(t *testing.T) {
	kinds := []struct {
		name string
		kind primitive
	}{
		{"exclusive", nil},
		{"shared", readers()},
		{"reentrant", reentrant("job-1")},
		{"semaphore", permits(1, 1)},
	}
	for _, kind := range kinds {
		for _, queued := range []bool{false, true} {
			name := kind.name
			if queued {
				name += "/waiter queued"
			}
			t.Run(name, func(t *testing.T) {
				ctx := t.Context()
				hook := &resendReleases{}
				rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
				rdb.AddHook(hook)
				var lost atomic.Int64
				c, _ := newClientOn(t, rdb, dlock.Options{Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) { lost.Add(1) }}})
				other, _ := newClient(t, dlock.Options{})
				k := key(t)
				lk, err := kind.kind.Lock(ctx, c, k, dlock.WithTTL(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan error, 1)
				if queued {
					waiter := kind.kind
					if kind.name == "shared" {
						waiter = nil // a writer waits behind a reader
					}
					if kind.name == "reentrant" {
						waiter = reentrant("job-2")
					}
					go func() {
						w, err := waiter.Lock(ctx, other, k, dlock.WithTTL(5*time.Second))
						if err == nil {
							defer w.Unlock(context.WithoutCancel(ctx))
						}
						got <- err
					}()
					waitQueuedOn(t, rdb, k)
				}
				if err := lk.Unlock(ctx); err != nil {
					t.Fatalf("Unlock (sent twice by the Redis client): %v", err)
				}
				if hook.resent.Load() == 0 {
					t.Fatal("the release was not sent twice")
				}
				if err := lk.Err(); !errors.Is(err, dlock.ErrReleased) {
					t.Fatalf("Err after Unlock: %v", err)
				}
				if n := lost.Load(); n != 0 {
					t.Fatalf("Lost hook fired %d times for a release", n)
				}
				if queued {
					select {
					case err := <-got:
						if err != nil {
							t.Fatalf("waiter: %v", err)
						}
					case <-time.After(10 * time.Second):
						t.Fatal("the waiter did not get the lock")
					}
				}
			})
		}
	}
}

// waitQueuedOn waits until k's wait queue has a member.
func waitQueuedOn(t *testing.T, rdb *redis.Client, k string) {
	t.Helper()
	q := "dlock:{" + k + "}:q"
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if n, err := rdb.LLen(t.Context(), q).Result(); err == nil && n > 0 {
			return
		}
	}
	t.Fatalf("nobody queued on %q", q)
}

// TestCounterResentByRedisClientCountsOnce: a take or a put-back that ran,
// lost its reply and was re-sent by go-redis itself changes the count once;
// so does a Set, and the recording of the segment count.
func TestCounterResentByRedisClientCountsOnce(t *testing.T) {
	ctx := t.Context()
	hook := &resendReleases{pipelines: true, match: func(name string) bool {
		return strings.HasPrefix(name, "counter_") || name == "incrby" || name == "set"
	}}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	rdb.AddHook(hook)
	c, _ := newClientOn(t, rdb, dlock.Options{})
	ctr := c.Counter(key(t), 1)
	if err := ctr.Set(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if total, err := ctr.Total(ctx); err != nil || total != 10 {
		t.Fatalf("after a Set sent twice: total %d, %v; want 10", total, err)
	}
	if _, err := ctr.Take(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	if total, err := ctr.Total(ctx); err != nil || total != 9 {
		t.Fatalf("after one take sent twice: total %d, %v; want 9", total, err)
	}
	failed := errors.New("payment failed")
	if _, err := ctr.Take(ctx, 2, func(context.Context, int) error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("Take with a failing fn: %v", err)
	}
	if total, err := ctr.Total(ctx); err != nil || total != 9 {
		t.Fatalf("after a take and its put-back, each sent twice: total %d, %v; want 9", total, err)
	}
	if hook.resent.Load() < 3 {
		t.Fatalf("only %d commands were sent twice", hook.resent.Load())
	}
}

// TestForceReleaseIsALossForTheHolder: an operator's ForceRelease leaves no
// release tombstone, so the holder's own Unlock reports the loss, for
// every kind of lock.
func TestForceReleaseIsALossForTheHolder(t *testing.T) {
	for _, kind := range []struct {
		name string
		kind primitive
	}{
		{"exclusive", nil},
		{"shared", readers()},
		{"reentrant", reentrant("job-1")},
		{"semaphore", permits(2, 1)},
	} {
		t.Run(kind.name, func(t *testing.T) {
			ctx := t.Context()
			c, _ := newClient(t, dlock.Options{})
			op, _ := newClient(t, dlock.Options{})
			k := key(t)
			lk, err := kind.kind.Lock(ctx, c, k, dlock.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := adminOf(t, op).ForceRelease(ctx, k); err != nil || !ok {
				t.Fatalf("ForceRelease: %v, %v", ok, err)
			}
			if err := lk.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
				t.Fatalf("the holder's Unlock after a ForceRelease: %v, want a loss", err)
			}
		})
	}
}

// TestMultiReleaseResentByRedisClientIsNotALoss: the same for a multi-key
// lock, in one slot and across slots.
func TestMultiReleaseResentByRedisClientIsNotALoss(t *testing.T) {
	for _, oneSlot := range []bool{true, false} {
		name := "across slots"
		if oneSlot {
			name = "one slot"
		}
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			hook := &resendReleases{}
			rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
			rdb.AddHook(hook)
			var lost atomic.Int64
			c, _ := newClientOn(t, rdb, dlock.Options{Hooks: dlock.Hooks{Lost: func(context.Context, dlock.LostInfo) { lost.Add(1) }}})
			base := key(t)
			keys := []string{base + ":a", base + ":b", base + ":c"}
			if oneSlot {
				keys = []string{"{" + base + "}a", "{" + base + "}b", "{" + base + "}c"}
			}
			lk, err := c.LockMulti(ctx, keys, dlock.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := lk.Unlock(ctx); err != nil {
				t.Fatalf("Unlock (sent twice by the Redis client): %v", err)
			}
			if hook.resent.Load() == 0 {
				t.Fatal("the release was not sent twice")
			}
			if n := lost.Load(); n != 0 {
				t.Fatalf("Lost hook fired %d times for a release", n)
			}
		})
	}
}
