package dlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestCommandBudget pins the number of Redis commands each step of a lock's
// life costs on a private server, the script call itself included (INFO
// commandstats counts a script's inner commands): an uncontended acquire
// and release, a waiter joining a queue, the release that hands the lock
// on and its confirmation, and a waiter giving up. It fails when a step
// gains a command; lower a budget when a step gets cheaper. Each step's
// count is the least of three runs: about one tombstone write in 16 also
// prunes the tombstones that ended (lualib/queue.lua's q_tomb), and a
// join in the same millisecond as the previous one sets the leases' TTL
// with a second PEXPIRE (q_keep_leases). It replaces the hand-off steps'
// budget of before (join 10, release 8, confirm 7 commands, then 6, 7
// and 6 once the join stopped reading the queue and the release read the
// key and the next lease in one MGET).
//
// With a waiter's lease and tombstone in keys of their own (before every
// key was declared), the steps took 6, 6, 4, 7, 6 and 6 commands (acquire,
// join, give up, hand-off, confirm, release).
func TestCommandBudget(t *testing.T) {
	ctx := t.Context()
	s := redistest.Start(t, redistest.Config{})
	rdb := s.Client(t)
	c, _ := newClientOn(t, s.NewClient(), dlock.Options{})
	type step struct {
		name   string
		budget int64
	}
	steps := []step{
		{"uncontended acquire", 6}, {"join a queue", 10}, {"join behind a waiter", 10},
		{"join behind two", 10}, {"give up", 7}, {"release, handing off", 10},
		{"confirm the hand-off", 6}, {"release, handing off again", 10}, {"confirm again", 6},
		{"uncontended release", 8}, {"uncontended acquire again", 6},
	}
	least := make([]int64, len(steps))
	for run := range 3 {
		d, err := dlock.NewScriptDriver(ctx, c, []string{fmt.Sprintf("budget-%d", run)})
		if err != nil {
			t.Fatal(err)
		}
		ttl := 10 * time.Second
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
		leave := func(tok string) func() {
			return func() {
				t.Helper()
				if err := d.Leave(ctx, tok); err != nil {
					t.Fatalf("leave: %v", err)
				}
			}
		}
		// Load the scripts and let one pair leave its keys behind: the
		// steps below are a steady state's.
		warm := dlock.NewTestToken()
		acquire(warm, "try", true)()
		release(warm)()
		holder, w1, w2, w3 := dlock.NewTestToken(), dlock.NewTestToken(), dlock.NewTestToken(), dlock.NewTestToken()
		runs := []func(){
			acquire(holder, "try", true), acquire(w1, "q1", false), acquire(w2, "q1", false),
			acquire(w3, "q1", false), leave(w3), release(holder),
			acquire(w1, "q", true), release(w1), acquire(w2, "q", true),
			release(w2), acquire(dlock.NewTestToken(), "try", true),
		}
		for i, st := range steps {
			n, by := stepCommands(t, ctx, rdb, runs[i])
			t.Logf("run %d, %s: %d commands:%s", run, st.name, n, fmtCommands(by))
			if run == 0 || n < least[i] {
				least[i] = n
			}
		}
	}
	for i, st := range steps {
		if least[i] > st.budget {
			t.Errorf("%s: %d commands, budget %d", st.name, least[i], st.budget)
		}
	}
}
