package rexec_test

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
)

// A script the server does not have (after SCRIPT FLUSH, a restart or a
// failover) runs by EVAL, whichever way it is sent: alone, built as its
// EVALSHA arguments, or in a batch beside calls the server has.
func TestNoScriptRunsByEval(t *testing.T) {
	x, rdb, _, _ := faulty(t)
	ctx := context.Background()
	flush := func() {
		t.Helper()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	raw := func(k, token string) rexec.Raw {
		return rexec.Raw{Args: []any{"evalsha", scripts.Acquire.Hash(), 3, k, k + ":fence", k + ":queue",
			token, int64(60000), int64(70000), "try"}, Src: scripts.Body(scripts.Acquire)}
	}

	flush()
	if err := granted(x.Run(ctx, acquire(key(t, "run"), "t"))); err != nil {
		t.Fatalf("Run after SCRIPT FLUSH: %v", err)
	}
	flush()
	if err := granted(x.RunRaw(ctx, raw(key(t, "raw"), "t"))); err != nil {
		t.Fatalf("RunRaw after SCRIPT FLUSH: %v", err)
	}
	flush()
	calls := []protocol.Call{acquire(key(t, "a"), "t"), {}, acquire(key(t, "c"), "t")}
	cmds := x.Send(ctx, calls, []rexec.Raw{{}, raw(key(t, "b"), "t"), {}})
	for i, cmd := range cmds {
		if err := granted(cmd); err != nil {
			t.Fatalf("Send after SCRIPT FLUSH, call %d: %v", i, err)
		}
	}
	flush()
	for i, cmd := range x.Batch(ctx, []protocol.Call{acquire(key(t, "d"), "t"), acquire(key(t, "e"), "t")}) {
		if err := granted(cmd); err != nil {
			t.Fatalf("Batch after SCRIPT FLUSH, call %d: %v", i, err)
		}
	}
	if ok, err := rdb.ScriptExists(ctx, scripts.Acquire.Hash()).Result(); err != nil || !ok[0] {
		t.Fatalf("acquire.lua not loaded again by its EVAL (%v, %v)", ok, err)
	}
}
