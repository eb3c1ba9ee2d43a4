package rexec_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// While every writer is busy, the calls of other goroutines wait and then
// leave together, as one pipeline, and each gets its own reply.
func TestPipelineBatchesWaitingCalls(t *testing.T) {
	x, rdb, inj, pc := faulty(t)
	ctx := context.Background()
	writers := blockWriters(t, x, rdb, inj, "go")
	const n = 20
	var wg sync.WaitGroup
	keys := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		keys[i] = key(t, fmt.Sprint(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = granted(x.Run(ctx, acquire(keys[i], fmt.Sprint("token", i))))
		}()
	}
	waitPending(t, x, n)
	if err := rdb.Echo(ctx, "go").Err(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := writers(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if v, _ := rdb.Get(ctx, keys[i]).Result(); v != fmt.Sprint("token", i) {
			t.Fatalf("%s holds %q, want its caller's token", keys[i], v)
		}
	}
	found := false
	for _, s := range pc.got() {
		found = found || s >= n
	}
	if !found {
		t.Fatalf("pipelines sent: %v; want one carrying the %d waiting calls", pc.got(), n)
	}
}

// A caller whose ctx ends while its call waits for a writer takes it back:
// it returns at once, with ctx's error, and the call is never sent.
func TestPipelineCallerLeavesBeforeSend(t *testing.T) {
	x, rdb, inj, _ := faulty(t)
	k := key(t, "left")
	seen := inj.Add(faultcmd.Rule{Name: "sent", Action: faultcmd.Observe, Times: -1,
		Match: faultcmd.Match{Script: "acquire", Key: k}})
	writers := blockWriters(t, x, rdb, inj, "go")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx, acquire(k, "t")).Err() }()
	waitPending(t, x, 1)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v, want ctx's error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the caller did not leave when its ctx ended")
	}
	if x.Pending() != 0 {
		t.Fatalf("%d calls pending after their caller left", x.Pending())
	}
	if err := rdb.Echo(context.Background(), "go").Err(); err != nil {
		t.Fatal(err)
	}
	if err := writers(); err != nil {
		t.Fatal(err)
	}
	if seen.Fired() != 0 {
		t.Fatal("the call of a caller that left was sent")
	}
	if n, _ := rdb.Exists(context.Background(), k).Result(); n != 0 {
		t.Fatal("the key is held")
	}
}

// A script that is not one of package dlock's (a user's Protocol's) runs
// by itself, as its code expects: it never waits for a busy writer.
func TestPipelineOtherScriptsRunAlone(t *testing.T) {
	x, rdb, inj, _ := faulty(t)
	writers := blockWriters(t, x, rdb, inj, "go")
	own := protocol.Call{Script: redis.NewScript(`return redis.call('INCR', KEYS[1])`), Keys: []string{key(t, "n")}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if n, err := x.Run(ctx, own).Int64(); err != nil || n != 1 {
		t.Fatalf("a user's script while every writer is busy: %d, %v; want 1", n, err)
	}
	if err := rdb.Echo(context.Background(), "go").Err(); err != nil {
		t.Fatal(err)
	}
	if err := writers(); err != nil {
		t.Fatal(err)
	}
}

// Two Execs over one Redis client have a pipeline each: one whose writers
// are all busy does not hold up the other's calls.
func TestPipelinePerExec(t *testing.T) {
	x, rdb, inj, _ := faulty(t)
	other := rexec.New(rdb)
	writers := blockWriters(t, x, rdb, inj, "go")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := granted(other.Run(ctx, acquire(key(t, "other"), "t"))); err != nil {
		t.Fatalf("the other Exec's call while the first's writers are busy: %v", err)
	}
	if err := rdb.Echo(context.Background(), "go").Err(); err != nil {
		t.Fatal(err)
	}
	if err := writers(); err != nil {
		t.Fatal(err)
	}
}
