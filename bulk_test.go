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

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/probe"
)

// bulkCalls watches the bulk script calls in a go-redis client's
// pipelines: how many, how many locks they carried, whether every call's
// keys shared one Cluster slot. With resend, every pipeline that carries
// one is sent twice and answers with the second run, as go-redis does by
// itself (MaxRetries) when a connection breaks after the first run.
type bulkCalls struct {
	resend   bool
	calls    atomic.Int64 // bulk calls
	locks    atomic.Int64 // locks they carried
	resent   atomic.Int64
	mu       sync.Mutex
	crossing []string // calls whose keys span slots
}

func scriptOf(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	s, _ := args[1].(string)
	switch strings.ToLower(cmd.Name()) {
	case "evalsha", "fcall":
		return probe.ScriptName(s)
	case "eval":
		return probe.ScriptNameOfSource(s)
	}
	return ""
}

func (*bulkCalls) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*bulkCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *bulkCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		bulk := false
		for _, cmd := range cmds {
			if name := scriptOf(cmd); name == "extend_many" || name == "release_many" {
				bulk = true
				args := cmd.Args()
				n, _ := args[2].(int)
				keys := args[3 : 3+n]
				h.calls.Add(1)
				if name == "extend_many" { // keys (and fence counters when pushed), TTLs, tokens
					h.locks.Add(int64(len(args) - 3 - n - 2))
				} else { // key and queue, triples
					h.locks.Add(int64(n / 2))
				}
				slot := admin.Slot(fmt.Sprint(keys[0]))
				for _, k := range keys {
					if admin.Slot(fmt.Sprint(k)) != slot {
						h.mu.Lock()
						h.crossing = append(h.crossing, fmt.Sprint(keys))
						h.mu.Unlock()
						break
					}
				}
			}
		}
		if bulk && h.resend {
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

// waitFor polls cond until it holds; a hang guard, not a timing assertion.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// The watchdog renews many locks in bulk calls, each lock judged on its
// own: a stolen lock is reported lost (taken), the others in the same
// calls stay held and keep being renewed, also when go-redis re-sends the
// calls.
func TestBulkRenewalJudgesEachLock(t *testing.T) {
	rdb := srv.NewClient()
	h := &bulkCalls{resend: true}
	rdb.AddHook(h)
	// Renewed every 333 ms, as a TTL of 1 s would be, with a TTL that
	// outlasts a loaded machine's stalls.
	c, _ := newClientOn(t, rdb, dlock.Options{RenewInterval: 333 * time.Millisecond})
	const n = 300
	locks := holdMany(t, c, key(t), n, dlock.WithTTL(4*time.Second))
	stolen := locks[n/2]
	if err := srv.Client(t).Set(t.Context(), stolen.Key(), "another owner's token", redis.KeepTTL).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stolen lock's loss", func() bool { return stolen.Err() != nil })
	if err := stolen.Err(); !errors.Is(err, dlock.ErrTaken) {
		t.Fatalf("stolen lock: Err = %v, want ErrTaken", err)
	}
	r0 := c.Stats().Renewals
	waitFor(t, "20 more rounds of renewals (over 5 s: the fence counter is pushed out once in a while)", func() bool { return c.Stats().Renewals >= r0+20*(n-1) })
	r := srv.Client(t)
	for i, lk := range locks {
		if lk == stolen {
			continue
		}
		if lk.Err() != nil {
			t.Fatalf("lock %d: %v", i, lk.Err())
		}
		// Renewals push the fence counter out only every few seconds:
		// it must still outlive the lock.
		if k, f := r.PTTL(t.Context(), lk.Key()).Val(), r.PTTL(t.Context(), adminOf(t, c).KeysFor(lk.Key()).Fence).Val(); f <= k {
			t.Fatalf("lock %d: fence counter TTL %s, lock TTL %s", i, f, k)
		}
	}
	if s := c.Stats(); s.Lost != 1 {
		t.Fatalf("Stats.Lost = %d, want 1", s.Lost)
	}
	calls, carried := h.calls.Load(), h.locks.Load()
	t.Logf("%d bulk calls carried %d renewals (%.0f each); %d pipelines re-sent", calls, carried, float64(carried)/float64(max(calls, 1)), h.resent.Load())
	if calls == 0 || carried < 2*calls || h.resent.Load() == 0 {
		t.Fatalf("renewals were not sent in bulk: %d calls carried %d", calls, carried)
	}
}

// On a Cluster a script call's keys must share a slot: the bulk calls
// group locks by slot (SplitSlots makes one server behave like a Cluster
// here), and a lock alone in its slot goes as a single call.
func TestBulkRenewalGroupsBySlot(t *testing.T) {
	rdb := srv.NewClient()
	h := &bulkCalls{}
	rdb.AddHook(h)
	c, _ := newClientOn(t, rdb, dlock.Options{})
	dlock.SplitSlots(c)
	prefix := key(t)
	var locks []*dlock.Lock
	for g := range 4 {
		locks = append(locks, holdMany(t, c, fmt.Sprintf("{%s-%d}", prefix, g), 40, dlock.WithTTL(time.Second))...)
	}
	locks = append(locks, holdMany(t, c, prefix, 40, dlock.WithTTL(time.Second))...)
	r0 := c.Stats().Renewals
	waitFor(t, "three rounds of renewals", func() bool { return c.Stats().Renewals >= r0+3*uint64(len(locks)) })
	for i, lk := range locks {
		if lk.Err() != nil {
			t.Fatalf("lock %d: %v", i, lk.Err())
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.crossing) > 0 {
		t.Fatalf("%d bulk calls span slots, e.g. %s", len(h.crossing), h.crossing[0])
	}
	if h.calls.Load() == 0 {
		t.Fatal("no bulk call for locks sharing a slot")
	}
	t.Logf("%d bulk calls carried %d renewals", h.calls.Load(), h.locks.Load())
}

// Close releases in bulk calls that leave each lock's release tombstone:
// re-sent by go-redis, every release still reads "released", locks with
// queued waiters are handed to them, and nothing is lost or left held.
func TestCloseBulkReleaseResent(t *testing.T) {
	rdb := srv.NewClient()
	h := &bulkCalls{resend: true}
	rdb.AddHook(h)
	c, _ := newClientOn(t, rdb, dlock.Options{})
	const n, queued = 200, 10
	prefix := key(t)
	locks := holdMany(t, c, prefix, n, dlock.WithTTL(time.Minute))
	other, _ := newClient(t, dlock.Options{})
	got := make(chan *dlock.Lock, queued)
	for i := range queued {
		go func() {
			lk, err := other.Lock(t.Context(), locks[i*7].Key())
			if err != nil {
				t.Error(err)
			}
			got <- lk
		}()
	}
	waitFor(t, "the waiters to queue", func() bool { return other.Stats().Waiting == queued })
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if s := c.Stats(); s.Released != n || s.Lost != 0 || s.Held != 0 {
		t.Fatalf("after Close: Released %d, Lost %d, Held %d", s.Released, s.Lost, s.Held)
	}
	for range queued {
		if lk := <-got; lk == nil || lk.Err() != nil {
			t.Fatal("a queued waiter did not get its lock")
		}
	}
	r := srv.Client(t)
	for _, lk := range locks {
		if err := r.ZScore(t.Context(), adminOf(t, c).KeysFor(lk.Key()).Tombs, lk.Token()).Err(); err != nil {
			t.Fatalf("lock %s: no release tombstone (%v)", lk.Key(), err)
		}
	}
	if h.calls.Load() == 0 || h.resent.Load() == 0 {
		t.Fatalf("Close sent %d bulk calls, %d re-sent", h.calls.Load(), h.resent.Load())
	}
	t.Logf("Close: %d bulk calls carried %d releases", h.calls.Load(), h.locks.Load())
}
