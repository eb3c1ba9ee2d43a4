package rexec_test

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// A script the server does not have (after SCRIPT FLUSH, a restart or a
// failover) runs by EVAL, whichever way it is sent: alone, built as its
// EVALSHA arguments, or in a batch beside calls the server has.
func TestNoScriptRunsByEval(t *testing.T) {
	x, rdb, _, _ := faulty(t)
	x.NoFunctions()
	ctx := context.Background()
	runsAfter(t, x, func() error { return rdb.ScriptFlush(ctx).Err() })
	if ok, err := rdb.ScriptExists(ctx, scripts.Acquire.Hash()).Result(); err != nil || !ok[0] {
		t.Fatalf("acquire.lua not loaded again by its EVAL (%v, %v)", ok, err)
	}
}

// A function the server does not have (after FUNCTION FLUSH, a restart or
// a failover) runs once the Exec loaded the library again, whichever way
// it is sent.
func TestNoFunctionLoadsLibrary(t *testing.T) {
	x, rdb, _, _ := faulty(t)
	ctx := context.Background()
	runsAfter(t, x, func() error { return rdb.FunctionFlush(ctx).Err() })
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: scripts.Lib().Name}).Result()
	if err != nil || len(libs) != 1 {
		t.Fatalf("the library is not loaded again (%v, %v)", libs, err)
	}
	if !x.Functions() {
		t.Fatal("the Exec stopped using Functions")
	}
}

// runsAfter checks that x's calls, sent alone, as built arguments, in a
// batch and in a batch with built arguments, run after flush.
func runsAfter(t *testing.T, x *rexec.Exec, flush func() error) {
	t.Helper()
	ctx := context.Background()
	raw := func(k, token string) rexec.Raw {
		return rexec.Raw{Args: []any{"evalsha", scripts.Acquire.Hash(), 5, k, k + ":fence", k + ":queue", k + ":waiters", k + ":tombs",
			token, int64(60000), int64(70000), "try"}, Src: scripts.Body(scripts.Acquire)}
	}
	must := func() {
		t.Helper()
		if err := flush(); err != nil {
			t.Fatal(err)
		}
	}
	must()
	if err := granted(x.Run(ctx, acquire(key(t, "run"), "t"))); err != nil {
		t.Fatalf("Run after the flush: %v", err)
	}
	must()
	if err := granted(x.RunRaw(ctx, raw(key(t, "raw"), "t"))); err != nil {
		t.Fatalf("RunRaw after the flush: %v", err)
	}
	must()
	calls := []protocol.Call{acquire(key(t, "a"), "t"), {}, acquire(key(t, "c"), "t")}
	cmds := x.Send(ctx, calls, []rexec.Raw{{}, raw(key(t, "b"), "t"), {}})
	for i, cmd := range cmds {
		if err := granted(cmd); err != nil {
			t.Fatalf("Send after the flush, call %d: %v", i, err)
		}
	}
	must()
	for i, cmd := range x.Batch(ctx, []protocol.Call{acquire(key(t, "d"), "t"), acquire(key(t, "e"), "t")}) {
		if err := granted(cmd); err != nil {
			t.Fatalf("Batch after the flush, call %d: %v", i, err)
		}
	}
}
