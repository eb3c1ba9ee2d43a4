package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	ctx := context.Background()
	key := testKey(t)
	lk := hold(t, key)

	r := dlockRun(t, nil, onSrv("status", key)...)
	expectCode(t, r, 0)
	for _, s := range []string{key, "held", "token", lk.Token()[:6] + "…", "ttl", "fence", "waiters"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("status lacks %q:\n%v", s, r)
		}
	}

	r = dlockRun(t, nil, onSrv("status", key, "--json", "--show-token")...) // flag after KEY
	expectCode(t, r, 0)
	var v lockView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("status --json: %v\n%v", err, r)
	}
	if v.Key != key || v.State != "held" || !v.Held || v.Kind != "token" || v.Value != lk.Token() ||
		v.Fence != lk.Fence() || v.TTLms <= 20_000 || v.TTLms > 30_000 {
		t.Errorf("status --json: %+v; want held by %s, fence %d, ttl ~30s", v, lk.Token(), lk.Fence())
	}

	// A queued waiter shows in the waiters column.
	waiter, wrdb := lib(t)
	adm := adminOn(t, wrdb)
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = waiter.Lock(wctx, key) }()
	waitFor(t, 5*time.Second, "a queued waiter", func() bool {
		info, _ := adm.Inspect(ctx, key)
		return info.Queued == 1
	})
	r = dlockRun(t, nil, onSrv("status", key, "--json")...)
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Waiters != 1 {
		t.Errorf("status --json with one waiter queued: waiters %d (%v)\n%v", v.Waiters, err, r)
	}
	cancel()

	free := testKey(t)
	r = dlockRun(t, nil, onSrv("status", free)...)
	expectCode(t, r, 3)
	if !strings.Contains(r.stdout, "free") {
		t.Errorf("status of a free key:\n%v", r)
	}

	list := testKey(t)
	rdb.RPush(ctx, list, "x")
	r = dlockRun(t, nil, onSrv("status", "--json", list)...)
	expectCode(t, r, 4)
	if !strings.Contains(r.stdout, `"state": "not-a-lock"`) {
		t.Errorf("status of a list:\n%v", r)
	}

	foreign := testKey(t)
	rdb.Set(ctx, foreign, "some other client's value", time.Minute)
	r = dlockRun(t, nil, onSrv("status", foreign)...)
	expectCode(t, r, 0)
	if !strings.Contains(r.stdout, "foreign") {
		t.Errorf("status of a foreign lock:\n%v", r)
	}

	expectCode(t, dlockRun(t, nil, onSrv("status")...), 2)
	expectCode(t, dlockRun(t, nil, onSrv("status", "a", "b")...), 2)
}

func TestList(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	ctx := context.Background()
	// A prefix of our own, so other tests' locks don't show.
	prefix := "listtest"
	keys := []string{testKey(t), testKey(t)}
	for _, k := range keys {
		r := startDlock(t, nil, onSrv("run", "--prefix", prefix, k, "--", "sleep", "30")...)
		_ = r
	}
	waitFor(t, 10*time.Second, "both locks", func() bool {
		return rdb.Exists(ctx, keys...).Val() == 2
	})

	r := dlockRun(t, nil, onSrv("--prefix", prefix, "list")...)
	expectCode(t, r, 0)
	for _, k := range keys {
		if !strings.Contains(r.stdout, k) {
			t.Errorf("list lacks %s:\n%v", k, r)
		}
	}
	if !strings.Contains(r.stdout, "KEY") || !strings.Contains(r.stdout, "FENCE") {
		t.Errorf("list has no header:\n%v", r)
	}

	r = dlockRun(t, nil, onSrv("list", "--prefix", prefix, "--json")...)
	expectCode(t, r, 0)
	var views []lockView
	if err := json.Unmarshal([]byte(r.stdout), &views); err != nil {
		t.Fatalf("list --json: %v\n%v", err, r)
	}
	if len(views) != 2 {
		t.Fatalf("list --json found %d locks, want 2:\n%v", len(views), r)
	}
	for _, v := range views {
		if !v.Held || v.Kind != "token" || v.Fence == 0 {
			t.Errorf("list --json: %+v", v)
		}
	}

	// A pattern also finds string keys dlock did not lock, but never dlock's
	// own fence counters.
	other := "listtest-foreign:" + keys[0]
	rdb.Set(ctx, other, "x", time.Minute)
	r = dlockRun(t, nil, onSrv("list", "--prefix", prefix, "--json", "*"+strings.TrimPrefix(keys[0], "test:")+"*")...)
	expectCode(t, r, 0)
	if err := json.Unmarshal([]byte(r.stdout), &views); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range views {
		got = append(got, v.Key)
	}
	if len(got) != 2 || !strings.Contains(strings.Join(got, " "), other) {
		t.Errorf("list with a pattern: %v; want %s and %s", got, keys[0], other)
	}

	r = dlockRun(t, nil, onSrv("list", "--prefix", prefix, "no-such-lock-*")...)
	expectCode(t, r, 3)
	expectCode(t, dlockRun(t, nil, onSrv("list", "a", "b")...), 2)
}

func TestRelease(t *testing.T) {
	t.Parallel()
	c, rdb := lib(t)
	ctx := context.Background()

	key := testKey(t)
	lk := hold(t, key)
	r := dlockRun(t, nil, onSrv("release", key, "--token", "not-the-token")...)
	expectCode(t, r, 1)
	expectStderr(t, r, "held by another owner")
	r = dlockRun(t, nil, onSrv("release", "--token", lk.Token(), key)...)
	expectCode(t, r, 0)
	if rdb.Exists(ctx, key).Val() != 0 {
		t.Fatal("release --token left the key")
	}
	r = dlockRun(t, nil, onSrv("release", key, "--token", lk.Token())...)
	expectCode(t, r, 3)
	expectStderr(t, r, "not held")

	// --force steals, and the holder finds out.
	key2 := testKey(t)
	lk2, err := c.TryLock(ctx, key2, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r = dlockRun(t, nil, onSrv("release", key2, "--force")...)
	expectCode(t, r, 0)
	select {
	case <-lk2.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the holder did not notice the forced release")
	}
	r = dlockRun(t, nil, onSrv("release", key2, "--force")...)
	expectCode(t, r, 3)

	list := testKey(t)
	rdb.RPush(ctx, list, "x")
	r = dlockRun(t, nil, onSrv("release", list, "--force")...)
	expectCode(t, r, 4)
	r = dlockRun(t, nil, onSrv("release", list, "--token", "x")...)
	expectCode(t, r, 4)
	if rdb.Exists(ctx, list).Val() != 1 {
		t.Fatal("release touched a non-lock key")
	}

	expectCode(t, dlockRun(t, nil, onSrv("release", key)...), 2)
	expectCode(t, dlockRun(t, nil, onSrv("release", key, "--force", "--token", "x")...), 2)
	expectCode(t, dlockRun(t, nil, onSrv("release", "--force")...), 2)
}
