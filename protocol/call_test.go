package protocol_test

import (
	"testing"

	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// TestRunLoadsMissingScript: a script the server does not have (never
// loaded, or flushed) runs by EVAL, and runs by EVALSHA after that.
func TestRunLoadsMissingScript(t *testing.T) {
	ctx := t.Context()
	rdb := srv.Client(t)
	s := redis.NewScript(`return tonumber(ARGV[1]) + 1`)
	c := protocol.Call{Script: s, Args: []any{41}}
	for i, flush := range []bool{true, false, true} {
		if flush {
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := c.Run(ctx, rdb).Int64(); err != nil || n != 42 {
			t.Fatalf("run %d: %d, %v; want 42", i, n, err)
		}
		if ok, err := rdb.ScriptExists(ctx, s.Hash()).Result(); err != nil || !ok[0] {
			t.Fatalf("run %d: the script is not loaded after Run (%v, %v)", i, ok, err)
		}
	}
}

// TestRunErrors: an error reply other than NOSCRIPT is returned as it is.
func TestRunErrors(t *testing.T) {
	ctx := t.Context()
	rdb := srv.Client(t)
	c := protocol.Call{Script: redis.NewScript(`return redis.error_reply('MYERR no')`)}
	if err := c.Run(ctx, rdb).Err(); err == nil || err.Error() != "MYERR no" {
		t.Fatalf("Run = %v, want MYERR no", err)
	}
}
