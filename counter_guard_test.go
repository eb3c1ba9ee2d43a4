package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
)

// countKeyOf is the count key of segment seg of the Counter name under the
// default prefix (docs/keys.md).
func countKeyOf(name, seg string) string { return "dlock:{" + name + ":" + seg + "}:count" }

// segmentWrite matches a write of a count by Set: counter_set.lua, or the
// plain SET that wrote the count before.
func segmentWrite(name string) faultcmd.Match {
	return faultcmd.Match{Func: func(c faultcmd.Command) bool {
		return c.Script == "counter_set" || (c.Name == "set" && strings.HasPrefix(c.Key, "dlock:{"+name+":"))
	}}
}

// A Set whose write is held up while an operator force-releases the
// segment's lock and another Client sells a unit lands on nothing: the
// sold unit is not put back on sale. Before, Set wrote the count with a
// plain SET, and the late write restored the stock to 5 after the sale.
func TestCounterSetLandingAfterTakeoverWritesNothing(t *testing.T) {
	ctx := t.Context()
	a, inj := faultyClient(t, dlock.Options{})
	rdbB := srv.NewClient()
	rdbB.AddHook(inj) // so the hold sees B's take complete
	b, _ := newClientOn(t, rdbB, dlock.Options{})
	op, _ := newClient(t, dlock.Options{})
	name := key(t)
	stock := a.Counter(name, 1)
	if err := stock.Set(ctx, 5); err != nil {
		t.Fatal(err)
	}
	hold := inj.Add(faultcmd.Rule{Name: "held Set write", Action: faultcmd.Hold, HoldTimeout: time.Minute,
		Match: segmentWrite(name), Until: faultcmd.Match{Script: "counter_add"}})
	done := make(chan error, 1)
	go func() { done <- stock.Set(ctx, 5) }()
	await(t, hold.FiredC(), "the Set's write to be held")
	if ok, err := adminOf(t, op).ForceRelease(ctx, name+":0"); !ok || err != nil {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	sb := b.Counter(name, 1)
	if seg, err := sb.Take(ctx, 1, nil); seg != 0 || err != nil {
		t.Fatalf("Take after the ForceRelease = %d, %v", seg, err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the held Set never returned")
	}
	if !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Set whose lock was taken over = %v, want ErrLost", err)
	}
	if n, err := sb.Total(ctx); err != nil || n != 4 {
		t.Fatalf("stock after the late Set = %d, %v; want 4 (the sold unit stays sold)", n, err)
	}
}

// A put-back (fn failed) that lands late, after the taker's lock ended and
// a Set wrote a new stock, writes nothing. Before, put-backs skipped the
// lock check and added the units on top of the new stock.
func TestCounterPutBackLandingAfterSetWritesNothing(t *testing.T) {
	ctx := t.Context()
	c, inj := faultyClient(t, dlock.Options{})
	name := key(t)
	stock := c.Counter(name, 1)
	if err := stock.Set(ctx, 5); err != nil {
		t.Fatal(err)
	}
	late := inj.Add(faultcmd.Rule{Name: "late put-back", Action: faultcmd.Late, Nth: 2, HoldTimeout: time.Minute,
		Match: faultcmd.Match{Script: "counter_add"}, Until: segmentWrite(name)})
	boom := errors.New("order failed")
	seg, err := stock.Take(ctx, 2, func(context.Context, int) error { return boom })
	if seg != -1 || !errors.Is(err, boom) || !errors.Is(err, dlock.ErrMaybeApplied) {
		t.Fatalf("Take whose put-back reply was lost = %d, %v; want -1, fn's error and ErrMaybeApplied", seg, err)
	}
	if late.Fired() != 1 {
		t.Fatalf("the put-back was not held back (fired %d)", late.Fired())
	}
	if err := stock.Set(ctx, 10); err != nil {
		t.Fatal(err)
	}
	waitLog(t, inj, "late put-back", "sent ")
	if n, err := stock.Total(ctx); err != nil || n != 10 {
		t.Fatalf("stock after the late put-back = %d, %v; want 10 (what Set wrote)", n, err)
	}
}

// waitLog waits until inj logged an event of rule whose outcome starts
// with prefix.
func waitLog(t *testing.T, inj *faultcmd.Injector, rule, prefix string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, e := range inj.Log() {
			if e.Rule == rule && strings.HasPrefix(e.Outcome, prefix) {
				return
			}
		}
	}
	t.Fatalf("no %q event of rule %q", prefix, rule)
}

// A Counter used with another segment count than it was created with is
// refused by every operation, and nothing is written. Before, a 2-segment
// Total of a 4-segment counter answered half the stock, and its Take sold
// from half of it.
func TestCounterSegmentMismatch(t *testing.T) {
	ctx := t.Context()
	c, _ := newClient(t, dlock.Options{})
	name := key(t)
	four := c.Counter(name, 4)
	if err := four.Set(ctx, 8); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 8} {
		other := c.Counter(name, n)
		if total, err := other.Total(ctx); !errors.Is(err, dlock.ErrSegmentMismatch) {
			t.Errorf("%d-segment Total of a 4-segment counter = %d, %v; want ErrSegmentMismatch", n, total, err)
		}
		if seg, err := other.Take(ctx, 1, func(context.Context, int) error { t.Error("fn ran"); return nil }); seg != -1 || !errors.Is(err, dlock.ErrSegmentMismatch) {
			t.Errorf("%d-segment Take of a 4-segment counter = %d, %v; want -1, ErrSegmentMismatch", n, seg, err)
		}
		if err := other.Set(ctx, 100); !errors.Is(err, dlock.ErrSegmentMismatch) {
			t.Errorf("%d-segment Set of a 4-segment counter = %v; want ErrSegmentMismatch", n, err)
		} else if !strings.Contains(err.Error(), "has 4 segments") {
			t.Errorf("the error does not name the recorded count: %v", err)
		}
	}
	if total, err := four.Total(ctx); err != nil || total != 8 {
		t.Fatalf("4-segment Total after the refused calls = %d, %v; want 8", total, err)
	}
}

// A counter written by an older version (counts, no recorded segment
// count) gets the segment count of its first operation, but only if the
// counts found fit it.
func TestCounterWithoutRecordedSegments(t *testing.T) {
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{})
	name := key(t)
	for seg := range 4 { // what an older Set(8) of 4 segments left
		if err := rdb.Set(ctx, countKeyOf(name, string(rune('0'+seg))), 2, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []int{2, 8} {
		other := c.Counter(name, n)
		if total, err := other.Total(ctx); !errors.Is(err, dlock.ErrSegmentMismatch) {
			t.Errorf("%d-segment Total of an unrecorded 4-segment counter = %d, %v", n, total, err)
		}
		if seg, err := other.Take(ctx, 1, nil); !errors.Is(err, dlock.ErrSegmentMismatch) {
			t.Errorf("%d-segment Take of an unrecorded 4-segment counter = %d, %v", n, seg, err)
		}
	}
	if n, _ := rdb.Keys(ctx, "dlock:{"+name+":*}:segments").Result(); len(n) != 0 {
		t.Fatalf("refused calls recorded segment counts: %v", n)
	}
	four := c.Counter(name, 4)
	if total, err := four.Total(ctx); err != nil || total != 8 {
		t.Fatalf("4-segment Total = %d, %v", total, err)
	}
	if _, err := four.Take(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	for seg := range 4 {
		k := "dlock:{" + name + ":" + string(rune('0'+seg)) + "}:segments"
		if v, err := rdb.Get(ctx, k).Result(); err != nil || v != "4" {
			t.Fatalf("%s = %q, %v; want 4 recorded by the first operation", k, v, err)
		}
	}
	two := c.Counter(name, 2)
	if _, err := two.Total(ctx); !errors.Is(err, dlock.ErrSegmentMismatch) || !strings.Contains(err.Error(), "has 4 segments") {
		t.Fatalf("2-segment Total after the count was recorded = %v", err)
	}
}

// Two first operations with different segment counts at once (two Sets,
// or two Takes, which hold one segment's lock each): one count is
// recorded, on every segment the same, and only the other caller is
// refused.
func TestCounterFirstOperationsRace(t *testing.T) {
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{})
	for round := range 20 {
		name := key(t)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, n := range []int{2, 4} {
			wg.Go(func() {
				ctr := c.Counter(name, n)
				if round%2 == 0 {
					errs[i] = ctr.Set(ctx, 8)
				} else {
					_, errs[i] = ctr.Take(ctx, 1, nil) // nothing to take: ErrExhausted
				}
			})
		}
		wg.Wait()
		refused := 0
		for _, err := range errs {
			switch {
			case errors.Is(err, dlock.ErrSegmentMismatch):
				refused++
			case err != nil && !errors.Is(err, dlock.ErrExhausted):
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if refused != 1 {
			t.Fatalf("round %d: 2 and 4 segments at once: %v, %v; want exactly one ErrSegmentMismatch", round, errs[0], errs[1])
		}
		keys, _ := rdb.Keys(ctx, "dlock:{"+name+":*}:segments").Result()
		seen := map[string]bool{}
		for _, k := range keys {
			seen[rdb.Get(ctx, k).Val()] = true
		}
		if len(seen) != 1 {
			t.Fatalf("round %d: segment counts recorded: %v (%v)", round, seen, keys)
		}
	}
}

// markerTTLs runs every counter_add twice, as the Redis client does when it
// re-sends a command whose reply a broken connection lost, and records,
// between the two runs, the PTTLs of the operation's marker and of the
// segment's lock.
type markerTTLs struct {
	rdb          *redis.Client // reads the PTTLs, outside the hook
	mu           sync.Mutex
	marker, lock []time.Duration
}

func (*markerTTLs) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*markerTTLs) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *markerTTLs) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 6 || scriptOf(cmd) != "counter_add" {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		lock, marker := args[3].(string), args[5].(string)
		h.mu.Lock()
		h.marker = append(h.marker, h.rdb.PTTL(ctx, marker).Val())
		h.lock = append(h.lock, h.rdb.PTTL(ctx, lock).Val())
		h.mu.Unlock()
		cmd.SetErr(nil)
		return next(ctx, cmd)
	}
}

// A take's operation marker outlives its segment's lock: a copy of the
// take that the Redis client sends again while the take still holds the
// lock finds the marker and adds nothing. Before, the marker lived 10 s,
// so under a 30 s lock a copy landing 10 s after the first took the units
// a second time.
func TestCounterMarkerOutlivesLock(t *testing.T) {
	ctx := t.Context()
	hook := &markerTTLs{rdb: srv.NewClient()}
	t.Cleanup(func() { _ = hook.rdb.Close() })
	rdb := srv.NewClient()
	rdb.AddHook(hook)
	c, _ := newClientOn(t, rdb, dlock.Options{TTL: 30 * time.Second})
	ctr := c.Counter(key(t), 1)
	if err := ctr.Set(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := ctr.Take(ctx, 3, nil); err != nil {
		t.Fatal(err)
	}
	if total, err := ctr.Total(ctx); err != nil || total != 7 {
		t.Fatalf("after one take sent twice: total %d, %v; want 7", total, err)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	checked := 0
	for i := range hook.marker {
		if hook.marker[i] == -2 { // a run that applied nothing left no marker
			continue
		}
		checked++
		if hook.lock[i] <= 0 || hook.marker[i] < hook.lock[i] {
			t.Errorf("run %d: the operation's marker expires in %v, the segment's lock in %v; want the marker to outlive the lock", i, hook.marker[i], hook.lock[i])
		}
	}
	if checked == 0 {
		t.Fatal("no take that applied was sent twice")
	}
}

// A counter whose segment 0 records its segment count is judged by that
// record alone: records of other segments missing (their writes' replies
// lost) and a segment without a count (a Set that lost that segment's
// lock) are no mismatch. Before, the shape check meant for counters of
// older versions refused every later operation with ErrSegmentMismatch.
func TestCounterRecordedPartlyIsNoMismatch(t *testing.T) {
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{})
	name := key(t)
	stock := c.Counter(name, 4)
	if err := stock.Set(ctx, 8); err != nil {
		t.Fatal(err)
	}
	segs := func(seg string) string { return "dlock:{" + name + ":" + seg + "}:segments" }
	if err := rdb.Del(ctx, countKeyOf(name, "3"), segs("1"), segs("2"), segs("3")).Err(); err != nil {
		t.Fatal(err)
	}
	if total, err := stock.Total(ctx); total != 6 || err != nil {
		t.Fatalf("Total = %d, %v; want 6, nil", total, err)
	}
	for range 3 {
		if _, err := stock.Take(ctx, 1, nil); err != nil {
			t.Fatalf("Take: %v", err)
		}
	}
	if err := stock.Set(ctx, 4); err != nil {
		t.Fatalf("Set: %v", err)
	}
	for _, seg := range []string{"1", "2", "3"} {
		if v, _ := rdb.Get(ctx, segs(seg)).Result(); v != "4" {
			t.Fatalf("segment %s records %q after the next operation, want 4", seg, v)
		}
	}
	other := c.Counter(name, 2)
	if _, err := other.Total(ctx); !errors.Is(err, dlock.ErrSegmentMismatch) {
		t.Fatalf("a 2-segment Total = %v, want ErrSegmentMismatch", err)
	}
}
