package fenced_test

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/fenced"
	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/redis/go-redis/v9"
)

func TestSetRules(t *testing.T) {
	rdb := srv.Client(t)
	ctx := t.Context()
	k := key(t)
	set := func(fence uint64, owner, value string) error {
		return fenced.Set(ctx, rdb, k, fence, owner, value)
	}
	expectStale := func(err error, fence, last uint64) {
		t.Helper()
		var se *fenced.StaleError
		if !errors.Is(err, fenced.ErrStale) || !errors.As(err, &se) {
			t.Fatalf("err = %v, want a *fenced.StaleError", err)
		}
		if se.Key != k || se.Fence != fence || se.Last != last {
			t.Fatalf("StaleError = %+v, want fence %d last %d", se, fence, last)
		}
	}
	value := func(want string) {
		t.Helper()
		if got := rdb.Get(ctx, k).Val(); got != want {
			t.Fatalf("resource = %q, want %q", got, want)
		}
	}

	if f, err := fenced.Last(ctx, rdb, k); err != nil || f != 0 {
		t.Fatalf("Last of a fresh key = %d, %v", f, err)
	}
	if err := set(9, "a", "v9"); err != nil {
		t.Fatal(err)
	}
	if err := set(9, "a", "v9 again"); err != nil { // same grant again: idempotent
		t.Fatal(err)
	}
	value("v9 again")
	expectStale(set(9, "b", "tie"), 9, 9) // same fence, other owner: two grants, one fence
	expectStale(set(8, "a", "older"), 8, 9)
	value("v9 again")
	if err := set(10, "b", "v10"); err != nil { // 10 > 9 although "10" < "9" as strings
		t.Fatal(err)
	}
	expectStale(set(9, "a", "late"), 9, 10)
	value("v10")
	if f, err := fenced.Last(ctx, rdb, k); err != nil || f != 10 {
		t.Fatalf("Last = %d, %v", f, err)
	}

	// Delete follows the same rule, and the record stays: an older holder
	// cannot bring the key back.
	expectStale(fenced.Delete(ctx, rdb, k, 7, "c"), 7, 10)
	value("v10")
	if err := fenced.Delete(ctx, rdb, k, 11, "c"); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, k).Val() != 0 {
		t.Fatal("Delete left the key")
	}
	expectStale(set(10, "b", "resurrected"), 10, 11)
	if rdb.Exists(ctx, k).Val() != 0 {
		t.Fatal("a stale write recreated the key")
	}

	// The record keeps a hash of the owner, never the owner (a lock token
	// is a secret that can release the lock).
	rec := rdb.HGetAll(ctx, fenced.GuardKey(k)).Val()
	sum := sha1.Sum([]byte("c"))
	if rec["fence"] != "11" || rec["owner"] != hex.EncodeToString(sum[:]) {
		t.Fatalf("guard record = %v", rec)
	}
}

func TestSetExtremeFences(t *testing.T) {
	rdb := srv.Client(t)
	ctx := t.Context()
	k := key(t)
	// Decimal strings of different lengths and the uint64 limits compare
	// exactly (no float rounding: 2^64-1 and 2^64-2 differ).
	for _, f := range []uint64{1, 9, 10, 99, 100, 1 << 53, 1<<53 + 1, math.MaxUint64 - 1, math.MaxUint64} {
		if err := fenced.Set(ctx, rdb, k, f, "o"+strconv.FormatUint(f, 10), "x"); err != nil {
			t.Fatalf("fence %d: %v", f, err)
		}
		if f == 1 {
			continue
		}
		if err := fenced.Set(ctx, rdb, k, f-1, "other", "x"); !errors.Is(err, fenced.ErrStale) {
			t.Fatalf("fence %d after %d: %v", f-1, f, err)
		}
	}
	if f, _ := fenced.Last(ctx, rdb, k); f != math.MaxUint64 {
		t.Fatalf("Last = %d", f)
	}
}

func TestBadInput(t *testing.T) {
	rdb := srv.Client(t)
	ctx := t.Context()
	for name, err := range map[string]error{
		//lint:ignore SA1012 the nil-context error is what is tested
		"nil ctx":     fenced.Set(nil, rdb, "k", 1, "o", "v"),
		"nil client":  fenced.Set(ctx, (*redis.Client)(nil), "k", 1, "o", "v"),
		"empty key":   fenced.Set(ctx, rdb, "", 1, "o", "v"),
		"long key":    fenced.Set(ctx, rdb, strings.Repeat("k", keyrules.MaxKeyLength+1), 1, "o", "v"),
		"fence 0":     fenced.Set(ctx, rdb, "k", 0, "o", "v"),
		"empty owner": fenced.Delete(ctx, rdb, "k", 1, ""),
	} {
		if !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := fenced.Last(ctx, nil, "k"); !errors.Is(err, dlock.ErrNilClient) {
		t.Errorf("Last(nil client) = %v", err)
	}

	// A guard record that is not a hash is not ours: left alone.
	k := key(t)
	rdb.Set(ctx, fenced.GuardKey(k), "not a record", 0)
	if err := fenced.Set(ctx, rdb, k, 1, "o", "v"); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Set over a string record = %v", err)
	}
	if _, err := fenced.Last(ctx, rdb, k); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Last over a string record = %v", err)
	}
	if rdb.Exists(ctx, k).Val() != 0 {
		t.Fatal("written despite a foreign record")
	}

	// Redis down: ErrUnavailable.
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	defer dead.Close()
	if err := fenced.Set(ctx, dead, "k", 1, "o", "v"); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Set on a dead server = %v", err)
	}
}

func TestGuardKeyShareSlot(t *testing.T) {
	for _, k := range []string{"orders:1", "user:{42}:lock", "a}b{", "{}x", "{", "}", "{{a}}", "ünï"} {
		if g := fenced.GuardKey(k); admin.Slot(g) != admin.Slot(k) || g == k {
			t.Errorf("GuardKey(%q) = %q: slot %d, key slot %d", k, g, admin.Slot(g), admin.Slot(k))
		}
	}
	if g := fenced.GuardKey("orders:1"); g != "dlock:{orders:1}:guard" {
		t.Errorf("GuardKey = %q", g)
	}
}

// Concurrent writers with random fences: no write is accepted after a
// write with a larger fence has completed, and the value left is the one
// of the largest accepted fence.
func TestSetConcurrent(t *testing.T) {
	rdb := srv.Client(t)
	ctx := t.Context()
	k := key(t)
	type write struct {
		fence         uint64
		invoke, reply int64 // positions on one counter
	}
	var mu sync.Mutex
	var accepted []write
	var clock int64
	tick := func() int64 { mu.Lock(); defer mu.Unlock(); clock++; return clock }
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range 50 {
				f := 1 + r.Uint64N(200)
				in := tick()
				err := fenced.Set(ctx, rdb, k, f, fmt.Sprint("owner-", f), strconv.FormatUint(f, 10))
				out := tick()
				switch {
				case err == nil:
					mu.Lock()
					accepted = append(accepted, write{f, in, out})
					mu.Unlock()
				case !errors.Is(err, fenced.ErrStale):
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var largest uint64
	for _, w := range accepted {
		largest = max(largest, w.fence)
		for _, before := range accepted {
			if before.reply < w.invoke && before.fence > w.fence {
				t.Fatalf("fence %d accepted after fence %d had been", w.fence, before.fence)
			}
		}
	}
	last, err := fenced.Last(ctx, rdb, k)
	if err != nil {
		t.Fatal(err)
	}
	if last != largest || rdb.Get(ctx, k).Val() != strconv.FormatUint(largest, 10) {
		t.Fatalf("last fence %d, value %q, largest accepted %d", last, rdb.Get(ctx, k).Val(), largest)
	}
}

// The scenario fencing exists for: a holder pauses past its lease, a new
// holder writes, the old one wakes up and writes. The resource refuses it.
func TestSetRefusesPausedHolder(t *testing.T) {
	rdb := srv.Client(t)
	c, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	k := key(t)
	res := "resource:" + k
	old, err := c.Lock(ctx, k, dlock.WithTTL(100*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	if err := fenced.Set(ctx, rdb, res, old.Fence(), old.Token(), "old 1"); err != nil {
		t.Fatal(err)
	}
	// "Pause": no renewal, the lease runs out, a new holder takes over.
	cur, err := c.Lock(ctx, k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Unlock(ctx)
	if cur.Fence() <= old.Fence() {
		t.Fatalf("fences %d then %d", old.Fence(), cur.Fence())
	}
	if err := fenced.Set(ctx, rdb, res, cur.Fence(), cur.Token(), "new"); err != nil {
		t.Fatal(err)
	}
	err = fenced.Set(ctx, rdb, res, old.Fence(), old.Token(), "old 2")
	if !errors.Is(err, fenced.ErrStale) {
		t.Fatalf("late write of the old holder = %v, want ErrStale", err)
	}
	if v := rdb.Get(ctx, res).Val(); v != "new" {
		t.Fatalf("resource = %q", v)
	}
}
