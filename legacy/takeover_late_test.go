package legacy_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/legacy"
	"github.com/dlock-go/dlock/protocol"
)

// A takeover of an expired lock that lands late, after another contender
// took the key over, must not overwrite that holder's value. Before, the
// takeover was a GETSET, which overwrites whatever it finds: the key's
// claim moved back to the late contender's earlier expiry, and a third
// client could take the key over while the holder still trusted it.
func TestLateTakeoverKeepsNewerHolder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := legacy.New(legacy.Options{Unit: legacy.Milliseconds})
	k := key(t)
	admin := newRDB(t)
	expired := stamp(legacy.Milliseconds) - 5 // a dead holder's lock
	if err := admin.Set(ctx, k, expired, 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The takeover script is in the server's cache, so the late copy runs
	// as sent (a NOSCRIPT reply would hide the defect).
	warm := key(t)
	admin.Set(ctx, warm, expired, 0)
	b, rdbB := newDlock(t, dlock.Options{})
	if lk, err := b.TryLock(ctx, warm, with(p, time.Second)...); err != nil {
		t.Fatalf("warming up the takeover: %v", err)
	} else {
		_ = lk.Unlock(ctx)
	}

	inj := faultcmd.New()
	a, rdbA := newDlock(t, dlock.Options{})
	rdbA.AddHook(inj)
	rdbB.AddHook(inj)
	takeover := faultcmd.Match{Key: k, Func: isTakeover}
	late := inj.Add(faultcmd.Rule{Name: "late takeover", Action: faultcmd.Late,
		Match: takeover, Until: takeover})

	_, err := a.TryLock(ctx, k, with(p, time.Second)...)
	if late.Fired() != 1 || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("A's TryLock with its takeover late = %v (fault fired %d times), want ErrUnavailable", err, late.Fired())
	}
	lkB, err := b.TryLock(ctx, k, with(p, time.Minute, dlock.WithoutRenewal())...)
	if err != nil {
		t.Fatalf("B's takeover while A's is held back: %v", err)
	}
	landed := waitLanded(t, inj)
	t.Logf("A's takeover: %s", landed)

	if got := admin.Get(ctx, k).Val(); got != lkB.Token() {
		t.Fatalf("after A's late takeover the key holds %q, want B's %q", got, lkB.Token())
	}
	if strings.Contains(landed, "[1]") {
		t.Errorf("A's late takeover reports a win: %s", landed)
	}
	if err := lkB.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("B's renewal after A's late takeover: %v", err)
	}
	if err := lkB.Unlock(ctx); err != nil {
		t.Fatalf("B's Unlock: %v", err)
	}
}

// isTakeover matches the takeover of an expired lock: the script call
// (EVALSHA, and EVAL after NOSCRIPT) or the older clients' GETSET.
func isTakeover(c faultcmd.Command) bool { return isScript(c) || c.Name == "getset" }

// waitLanded waits until the Late rule's command was sent and returns its
// outcome (with the reply).
func waitLanded(t *testing.T, inj *faultcmd.Injector) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, e := range inj.Log() {
			if e.Action == faultcmd.Late && strings.HasPrefix(e.Outcome, "sent") {
				return e.Outcome
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the late takeover was never sent")
	return ""
}

// The same takeover sent twice (the Redis client re-sends a command whose
// reply a broken connection lost): the second copy answers the first
// copy's reply and writes nothing, whatever the key holds by then.
func TestResentTakeoverRunsOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := legacy.New(legacy.Options{Unit: legacy.Milliseconds})
	_, rdb := newDlock(t, dlock.Options{})
	k := key(t)
	expired := strconv.FormatInt(stamp(legacy.Milliseconds)-5, 10)
	v := strconv.FormatInt(stamp(legacy.Milliseconds)+60_000, 10)
	rdb.Set(ctx, k, expired, 0)

	won := p.TakeoverCall(adminOn(t, rdb).KeysFor(k), expired, v)
	for i := range 2 {
		if got, err := won.Run(ctx, rdb).Slice(); err != nil || fmt.Sprint(got) != "[1]" {
			t.Fatalf("winning takeover, copy %d = %v, %v; want [1]", i+1, got, err)
		}
	}
	// The key is freed and someone else takes it with the same value, or
	// the expired value comes back: a copy of a takeover that ran writes
	// nothing either way.
	lost := p.TakeoverCall(adminOn(t, rdb).KeysFor(k), expired, v+"0")
	if got, err := lost.Run(ctx, rdb).Slice(); err != nil || fmt.Sprint(got) != "[0 "+v+"]" {
		t.Fatalf("losing takeover = %v, %v; want [0 %s]", got, err, v)
	}
	rdb.Set(ctx, k, expired, 0)
	for i, call := range []protocol.Call{won, lost} {
		got, err := call.Run(ctx, rdb).Slice()
		if cur := rdb.Get(ctx, k).Val(); err != nil || cur != expired {
			t.Fatalf("takeover %d re-sent = %v, %v; the key holds %q, want it untouched", i+1, got, err, cur)
		}
	}
}
