package fenced_test

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fenced"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/redis/go-redis/v9"
)

// faulty returns a client of the shared server with a fault layer.
func faulty(t *testing.T) (*redis.Client, *faultcmd.Injector) {
	rdb := srv.Client(t)
	inj := faultcmd.New()
	rdb.AddHook(inj)
	return rdb, inj
}

// waitLate waits until a Late command of inj has been sent and answered.
func waitLate(t *testing.T, inj *faultcmd.Injector) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		for _, e := range inj.Log() {
			if e.Action == faultcmd.Late && strings.HasPrefix(e.Outcome, "sent") {
				t.Log(e)
				return
			}
		}
	}
	t.Fatal("the late write never landed")
}

// TestLateWriteOfSameGrant: a write of a grant whose reply was lost lands
// after a later write of the same grant (same fence, same owner): the
// resource keeps the later write. Also for a late Delete.
func TestLateWriteOfSameGrant(t *testing.T) {
	for _, op := range []string{"set", "del"} {
		t.Run(op, func(t *testing.T) {
			ctx := t.Context()
			rdb, inj := faulty(t)
			k := key(t)
			const fence, owner = 7, "grant-7"
			if err := fenced.Set(ctx, rdb, k, fence, owner, "first"); err != nil {
				t.Fatal(err)
			}
			late := faultcmd.Match{Script: "guard", Key: k, Arg: "X"}
			if op == "del" {
				late = faultcmd.Match{Script: "guard", Key: k, Arg: "del"}
			}
			inj.Add(faultcmd.Rule{Name: "write X lands after write Y", Action: faultcmd.Late,
				Match: late, Until: faultcmd.Match{Script: "guard", Key: k, Arg: "Y"}})
			var err error
			if op == "del" {
				err = fenced.Delete(ctx, rdb, k, fence, owner)
			} else {
				err = fenced.Set(ctx, rdb, k, fence, owner, "X")
			}
			if !errors.Is(err, dlock.ErrUnavailable) {
				t.Fatalf("write with its reply lost = %v, want ErrUnavailable", err)
			}
			if err := fenced.Set(ctx, rdb, k, fence, owner, "Y"); err != nil {
				t.Fatalf("later write Y: %v", err)
			}
			waitLate(t, inj)
			if v, err := rdb.Get(ctx, k).Result(); v != "Y" {
				t.Fatalf("after the late %s the resource holds %q (%v), want the later write Y", op, v, err)
			}
			if f, err := fenced.Last(ctx, rdb, k); f != fence || err != nil {
				t.Fatalf("Last = %d, %v", f, err)
			}
		})
	}
}

// TestResentWrite: a write whose reply was lost can be made again (a new
// write) or sent again as the same command (same sequence): both are
// applied; an older fence is still refused, and an older write of the
// grant is superseded.
func TestResentWrite(t *testing.T) {
	ctx := t.Context()
	rdb, inj := faulty(t)
	k := key(t)
	const fence, owner = 9, "grant-9"
	if err := fenced.Set(ctx, rdb, k, fence, owner, "warm"); err != nil {
		t.Fatal(err)
	}
	h := inj.Add(faultcmd.Rule{Action: faultcmd.DropReply, Match: faultcmd.Match{Script: "guard", Key: k, Arg: "X"}})
	if err := fenced.Set(ctx, rdb, k, fence, owner, "X"); !errors.Is(err, dlock.ErrUnavailable) || h.Fired() != 1 {
		t.Fatalf("Set with its reply dropped = %v (rule fired %d)", err, h.Fired())
	}
	if err := fenced.Set(ctx, rdb, k, fence, owner, "X"); err != nil {
		t.Fatalf("Set again after a lost reply: %v", err)
	}
	if v := rdb.Get(ctx, k).Val(); v != "X" {
		t.Fatalf("resource = %q", v)
	}

	// The same command twice (a client re-sending it): applied both times.
	seq := uint64(time.Now().UnixNano()) + uint64(time.Hour)
	for i := range 2 {
		if err := fenced.SetSeq(ctx, rdb, k, fence, owner, "Z", seq); err != nil {
			t.Fatalf("same command, send %d: %v", i+1, err)
		}
	}
	// An earlier write of the grant, arriving now: superseded, not stale.
	err := fenced.SetSeq(ctx, rdb, k, fence, owner, "old", seq-1)
	if !errors.Is(err, fenced.ErrSuperseded) || errors.Is(err, fenced.ErrStale) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("earlier write of the grant = %v, want a one-line ErrSuperseded", err)
	}
	if v := rdb.Get(ctx, k).Val(); v != "Z" {
		t.Fatalf("resource = %q, want Z", v)
	}
	// An older fence: refused, whatever its sequence.
	if err := fenced.SetSeq(ctx, rdb, k, fence-1, owner, "older", seq+1); !errors.Is(err, fenced.ErrStale) {
		t.Fatalf("older fence = %v, want ErrStale", err)
	}
	// A newer fence: accepted, whatever its sequence.
	if err := fenced.SetSeq(ctx, rdb, k, fence+1, "grant-10", "newer", 1); err != nil {
		t.Fatalf("newer fence with a small sequence: %v", err)
	}
	if v := rdb.Get(ctx, k).Val(); v != "newer" {
		t.Fatalf("resource = %q, want newer", v)
	}
}

// TestRecordWithoutSeq: a guard record written without a sequence (by an
// earlier version) accepts the next write of its grant and gains one.
func TestRecordWithoutSeq(t *testing.T) {
	ctx := t.Context()
	rdb := srv.Client(t)
	k := key(t)
	sum := sha1.Sum([]byte("o"))
	rdb.HSet(ctx, fenced.GuardKey(k), "fence", "5", "owner", hex.EncodeToString(sum[:]))
	if err := fenced.Set(ctx, rdb, k, 5, "o", "v"); err != nil {
		t.Fatalf("write of the recorded grant: %v", err)
	}
	if err := fenced.Set(ctx, rdb, k, 5, "other", "v"); !errors.Is(err, fenced.ErrStale) {
		t.Fatalf("same fence, other owner = %v, want ErrStale", err)
	}
	if rdb.HGet(ctx, fenced.GuardKey(k), "seq").Val() == "" {
		t.Fatal("no sequence recorded")
	}
}
