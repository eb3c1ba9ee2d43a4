package dlock_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// stepCommands runs step and returns the commands Redis ran for it, by
// name, from INFO commandstats (which counts the commands a script calls
// too), CONFIG RESETSTAT and INFO excluded.
func stepCommands(t *testing.T, ctx context.Context, rdb *redis.Client, step func()) (total int64, by map[string]int64) {
	t.Helper()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	step()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	by = map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(rest, "calls=") || name == "config|resetstat" || name == "info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		by[name] += n
		total += n
	}
	return total, by
}

func fmtCommands(by map[string]int64) string {
	var names []string
	for n := range by {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, " %s=%d", n, by[n])
	}
	return b.String()
}

// TestHandOffCommandBudget counts the Redis commands (scripts' inner
// commands included) of each step of a FIFO hand-off in steady contention
// on a private server: a waiter joining a non-empty queue, the holder's
// release handing the lock to the queue's head, and that waiter's
// confirmation. Before, the steps took 10, 8 and 7 commands: the join read
// the key by itself (GET), the queue's type twice (LINDEX, then LLEN) and
// its TTL before raising it (PTTL, then PEXPIRE), the release read the key and
// the next waiter's lease with two GETs, and the confirmation read its
// own lease (for a tombstone it cannot have while the key holds its
// token) and then the key. Since, the join no longer reads the queue
// (LINDEX) once its MGET found the key held: its RPUSH checks the type.
func TestHandOffCommandBudget(t *testing.T) {
	ctx := t.Context()
	s := redistest.Start(t, redistest.Config{})
	rdb := s.Client(t)
	c, _ := newClientOn(t, s.NewClient(), dlock.Options{})
	d, err := dlock.NewScriptDriver(ctx, c, []string{"budget"})
	if err != nil {
		t.Fatal(err)
	}
	ttl := 10 * time.Second
	holder, w1, w2 := dlock.NewTestToken(), dlock.NewTestToken(), dlock.NewTestToken()
	acquire := func(tok, mode string, want bool) func() {
		return func() {
			t.Helper()
			if ok, _, err := d.Acquire(ctx, tok, mode, ttl); err != nil || ok != want {
				t.Fatalf("%s: acquired %v, err %v; want %v", mode, ok, err, want)
			}
		}
	}
	release := func(tok string) func() {
		return func() {
			t.Helper()
			if code, err := d.Release(ctx, tok); err != nil || code != 1 {
				t.Fatalf("release: %d, %v", code, err)
			}
		}
	}
	// Load the scripts and queue a first waiter: the steps below are a
	// steady state's.
	first := dlock.NewTestToken()
	acquire(first, "try", true)()
	release(first)()
	acquire(holder, "try", true)()
	acquire(w1, "q1", false)()
	for _, step := range []struct {
		name   string
		run    func()
		budget int64
	}{
		{"join a queue", acquire(w2, "q1", false), 6},
		{"release, handing off", release(holder), 7},
		{"confirm the hand-off", acquire(w1, "q", true), 6},
		{"release, handing off again", release(w1), 7},
		{"confirm again", acquire(w2, "q", true), 6},
	} {
		n, by := stepCommands(t, ctx, rdb, step.run)
		t.Logf("%s: %d commands:%s", step.name, n, fmtCommands(by))
		if n > step.budget {
			t.Errorf("%s: %d commands, budget %d:%s", step.name, n, step.budget, fmtCommands(by))
		}
	}
	// A granted waiter keeps no lease (w1's lease key is its release
	// tombstone now).
	if n := rdb.Exists(ctx, d.Keys().Queue+":"+w2).Val(); n != 0 {
		t.Fatal("a granted waiter's lease outlives its grant")
	}
	if v := rdb.Get(ctx, d.Keys().Lock).Val(); v != w2 {
		t.Fatalf("the lock holds %q, want the second waiter's token", v)
	}
}
