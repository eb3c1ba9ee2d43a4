package protocol

import (
	"context"

	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/redis/go-redis/v9"
)

// Call is one script invocation. The engine runs the calls of Renew and
// Release by EVALSHA, falling back to EVAL on NOSCRIPT, alone or in the
// watchdog's pipelines.
type Call struct {
	Script *redis.Script
	Keys   []string
	Args   []any
}

// Run executes c on rdb by itself: EVALSHA, then EVAL on NOSCRIPT (after a
// restart, a failover or SCRIPT FLUSH), which also loads the script again.
func (c Call) Run(ctx context.Context, rdb redis.Scripter) *redis.Cmd {
	cmd := c.Script.EvalSha(ctx, rdb, c.Keys, c.Args...)
	if lualib.IsNoScript(cmd.Err()) {
		cmd = c.Script.Eval(ctx, rdb, c.Keys, c.Args...)
	}
	return cmd
}
