package dlock

import (
	"context"

	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Every script this package runs is in internal/scripts. Scripts run by
// EVALSHA; a NOSCRIPT reply (after a restart, a failover or SCRIPT FLUSH)
// falls back to EVAL, which also reloads it.
var (
	// The bodies of acquire.lua and release.lua, for the EVAL that
	// replaces their raw EVALSHA on NOSCRIPT (see rawCall).
	acquireBody = scripts.Body(scripts.Acquire)
	releaseBody = scripts.Body(scripts.Release)

	// The SHA1s of acquire.lua and release.lua as EVALSHA arguments,
	// boxed once (see tokenLock.acquireRaw).
	acquireSHA any = scripts.Acquire.Hash()
	releaseSHA any = scripts.Release.Hash()
)

// runBatch runs calls in pipelines of at most batchSize (go-redis splits a
// pipeline per Cluster node or Ring shard), re-running by EVAL any call
// that met NOSCRIPT, and sending again any call Redis refused before
// running it, until it runs or ctx's bound (see refusal.go). It returns
// one Cmd per call, in order.
func runBatch(ctx context.Context, rdb redis.UniversalClient, calls []protocol.Call) []*redis.Cmd {
	return runBatchRetrying(ctx, rdb, calls)
}

// rawCall is a script call as the arguments of its EVALSHA command
// ("evalsha", sha, numkeys, keys..., args...), and the script's source
// for the EVAL that replaces it on NOSCRIPT.
type rawCall struct {
	args []any
	src  string
}

// runRaw is runBatch where calls[i] is sent as raw[i] if raw[i] has
// arguments (raw may be nil).
func runRaw(ctx context.Context, rdb redis.UniversalClient, calls []protocol.Call, raw []rawCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			if raw != nil && raw[i].args != nil {
				cmds[i] = raw[i].cmd(ctx)
				_ = p.Process(ctx, cmds[i])
				continue
			}
			cmds[i] = c.Script.EvalSha(ctx, p, c.Keys, c.Args...)
		}
		return nil
	})
	var again []int
	for i, cmd := range cmds {
		if lualib.IsNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range again {
				if raw != nil && raw[i].args != nil {
					raw[i].args[0], raw[i].args[1] = "eval", raw[i].src
					cmds[i] = raw[i].cmd(ctx)
					_ = p.Process(ctx, cmds[i])
					continue
				}
				cmds[i] = calls[i].Script.Eval(ctx, p, calls[i].Keys, calls[i].Args...)
			}
			return nil
		})
	}
	return cmds
}

// run executes r on rdb by itself: EVALSHA, then EVAL on NOSCRIPT, as
// Call.Run does.
func (r rawCall) run(ctx context.Context, rdb redis.UniversalClient) *redis.Cmd {
	cmd := r.cmd(ctx)
	_ = rdb.Process(ctx, cmd)
	if lualib.IsNoScript(cmd.Err()) {
		r.args[0], r.args[1] = "eval", r.src
		cmd = r.cmd(ctx)
		_ = rdb.Process(ctx, cmd)
	}
	return cmd
}

// cmd returns the command of r: its keys start at its fourth argument (a
// Cluster client routes it by the first).
func (r rawCall) cmd(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx, r.args...)
	if n, _ := r.args[2].(int); n > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// Reply codes shared by every extend and release script (see package
// protocol).
const (
	codeOK        = protocol.ReplyOK
	codeGone      = protocol.ReplyGone
	codeOther     = protocol.ReplyOtherOwner
	codeWrongType = protocol.ReplyWrongType
)
