// acked.go owns the calls that replicas acknowledge (Options.MinReplicas):
// a script call and WAIT in one pipeline on the key's master, following
// the MOVED and ASK redirections a node client does not.

package rexec

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// masterFor returns a client bound to the node that owns key.
func masterFor(ctx context.Context, rdb redis.UniversalClient, key string) (redis.UniversalClient, error) {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, key)
	}
	return rdb, nil
}

// maxAckedRedirects bounds the MOVED and ASK replies one RunAcked call
// follows: a failover or a slot migration needs one or two.
const maxAckedRedirects = 5

// RunAcked runs c and then WAIT replicas timeout in one pipeline on the
// master of c's first key, falling back to EVAL on NOSCRIPT: the writes of
// c, acknowledged by replicas (Options.MinReplicas), since WAIT covers the
// writes of the connection it runs on. It returns c's reply and the
// replicas that acknowledged.
//
// On a Cluster, the pipeline goes to the node the client's slot map names,
// which a failover or a slot migration leaves stale, and a plain node
// client follows no redirection: a MOVED or ASK reply is followed here,
// within ctx (see redirectTarget). Such a reply is a refusal before the
// script starts, so the call sent again is no second run of one that ran.
// Were one to run twice all the same, each is harmless: an acquire that
// finds the key holding its own token grants it again, and a withdrawn
// token is never granted (its tombstone, internal/lualib/queue.lua); a
// renewal is token-checked and never moves the expiry earlier (PEXPIRE
// GT, extend.lua).
func RunAcked(ctx context.Context, rdb redis.UniversalClient, c protocol.Call, replicas int, timeout time.Duration) (*redis.Cmd, int64, error) {
	w := waitFor{replicas, timeout}
	node, err := masterFor(ctx, rdb, c.Keys[0])
	if err != nil {
		return nil, 0, err
	}
	cc, _ := rdb.(*redis.ClusterClient)
	asking := false
	for hop := 0; ; hop++ {
		cmd, n, err := w.runOn(ctx, node, c, asking)
		moved, ask, addr := redirection(cmd.Err())
		if cc == nil || !moved && !ask || hop == maxAckedRedirects || ctx.Err() != nil {
			return cmd, n, err
		}
		next := redirectTarget(ctx, cc, c.Keys[0], node, ask, addr)
		if next == nil {
			return cmd, n, err
		}
		node, asking = next, ask
	}
}

// waitFor is the WAIT after an acked call: the replicas and the timeout.
type waitFor struct {
	replicas int
	timeout  time.Duration
}

// runOn runs c and then WAIT in one pipeline on node (after ASKING if
// asking: an ASK redirection), falling back to EVAL on NOSCRIPT.
func (w waitFor) runOn(ctx context.Context, node redis.UniversalClient, c protocol.Call, asking bool) (*redis.Cmd, int64, error) {
	var cmd *redis.Cmd
	var wait *redis.Cmd
	pipe := func(eval bool) {
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			if asking {
				p.Do(ctx, "asking")
			}
			if eval {
				cmd = c.Script.Eval(ctx, p, c.Keys, c.Args...)
			} else {
				cmd = c.Script.EvalSha(ctx, p, c.Keys, c.Args...)
			}
			wait = p.Do(ctx, "wait", w.replicas, w.timeout.Milliseconds())
			return nil
		})
	}
	pipe(false)
	if lualib.IsNoScript(cmd.Err()) {
		pipe(true)
	}
	if cmd.Err() != nil {
		return cmd, 0, cmd.Err()
	}
	n, err := wait.Int64()
	return cmd, n, err
}

// redirection reports whether err is a MOVED or ASK reply, and the
// address it names.
func redirection(err error) (moved, ask bool, addr string) {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return false, false, ""
	}
	f := strings.Fields(re.Error())
	if len(f) != 3 || f[0] != "MOVED" && f[0] != "ASK" {
		return false, false, ""
	}
	return f[0] == "MOVED", f[0] == "ASK", f[2]
}

// redirectTarget returns the node to send a call on key to after old
// answered MOVED (ask false) or ASK with addr, or nil if ctx ended first.
//
// MOVED (a failover, a finished migration): the slot map is reloaded in
// the background (ClusterClient.ReloadState, which go-redis coalesces and
// spaces 200ms apart, so a burst of redirected calls costs one reload),
// and the key's master is read from it until it has moved off old, for at
// most movedWait; failing that, the node at addr. ASK (a migration in
// progress, the map unchanged until it ends): the node at addr.
func redirectTarget(ctx context.Context, cc *redis.ClusterClient, key string, old redis.UniversalClient, ask bool, addr string) redis.UniversalClient {
	if !ask {
		cc.ReloadState(ctx)
		back := 5 * time.Millisecond
		for end := time.Now().Add(movedWait); ; {
			if m, err := cc.MasterForKey(ctx, key); err == nil && m != old {
				return m
			}
			if !time.Now().Before(end) {
				break
			}
			t := time.NewTimer(back)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			back = min(2*back, 50*time.Millisecond)
		}
	}
	return nodeAt(ctx, cc, addr)
}

// movedWait bounds the wait for a reloaded slot map after a MOVED reply.
const movedWait = time.Second

// nodeAt returns the client go-redis keeps for the node at addr, master
// or replica, after a reload of the slot map (nil if none).
func nodeAt(ctx context.Context, cc *redis.ClusterClient, addr string) redis.UniversalClient {
	var mu sync.Mutex
	var found *redis.Client
	_ = cc.ForEachShard(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	})
	if found == nil {
		return nil
	}
	return found
}
