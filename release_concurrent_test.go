package dlock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/redis/go-redis/v9"
)

// TestConcurrentUnlocksShareTheOutcome: two Unlocks of the same *Lock
// both keep sending the release while it fails; once one of them gets
// through, the other, backing off, returns that release's outcome, not
// its own last error: nil when the release ran, the loss when it found
// the key gone.
func TestConcurrentUnlocksShareTheOutcome(t *testing.T) {
	t.Run("released", func(t *testing.T) { concurrentUnlocks(t, false) })
	// lost: each Unlock returns an error (the loss, or the last error of
	// the one that backed off), never nil.
	t.Run("lost", func(t *testing.T) { concurrentUnlocks(t, true) })
}

func concurrentUnlocks(t *testing.T, lose bool) {
	rec := &callerLog{}
	rdb := srv.NewClient()
	rdb.AddHook(rec) // outermost: sees every call, also the failed ones
	inj := faultcmd.New()
	rdb.AddHook(inj)
	c, _ := newClientOn(t, rdb, dlock.Options{ReleaseTimeout: 20 * time.Second})
	k := key(t)
	lk, err := c.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	fail := inj.Add(faultcmd.Rule{Name: "release fails", Action: faultcmd.FailBefore, Times: -1,
		Match: faultcmd.Match{Script: "release", Key: k}, Err: errors.New("connection reset by peer")})
	errc := map[string]chan error{"a": make(chan error, 1), "b": make(chan error, 1)}
	for _, who := range []string{"a", "b"} {
		go func() {
			errc[who] <- lk.Unlock(context.WithValue(t.Context(), callerKey{}, who))
		}()
		rec.await(t, who) // each has sent the release, and backs off
	}
	if lose {
		// Gone with no tombstone of the token (an operator's delete): the
		// release that gets through reports the loss.
		if err := srv.NewClient().Del(t.Context(), k).Err(); err != nil {
			t.Fatal(err)
		}
	}
	fail.Remove()
	var got []error
	for _, who := range []string{"a", "b"} {
		select {
		case err := <-errc[who]:
			got = append(got, err)
		case <-time.After(20 * time.Second):
			t.Fatalf("Unlock %s did not return", who)
		}
	}
	for i, err := range got {
		switch {
		case lose && err == nil, !lose && err != nil:
			t.Errorf("Unlock %d = %v; want the outcome of the release that ran (lost: %v)", i, err, lose)
		}
	}
}

type callerKey struct{}

// callerLog is a go-redis hook that records the callerKey of the
// context of every command and pipeline.
type callerLog struct {
	mu   sync.Mutex
	seen []string
}

func (h *callerLog) note(ctx context.Context) {
	if who, ok := ctx.Value(callerKey{}).(string); ok {
		h.mu.Lock()
		h.seen = append(h.seen, who)
		h.mu.Unlock()
	}
}

// await waits until a command was sent with who's context.
func (h *callerLog) await(t *testing.T, who string) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		h.mu.Lock()
		ok := slices.Contains(h.seen, who)
		h.mu.Unlock()
		if ok {
			return
		}
	}
	t.Fatalf("no command sent by %s", who)
}

func (h *callerLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *callerLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(ctx)
		return next(ctx, cmd)
	}
}
func (h *callerLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.note(ctx)
		return next(ctx, cmds)
	}
}
