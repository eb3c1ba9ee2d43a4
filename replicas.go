package dlock

import (
	"context"
	"errors"
	"fmt"
	"github.com/dlock-go/dlock/internal/engine"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/dlock-go/dlock/internal/oneline"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// ackedTokenLock is the token lock with Options.MinReplicas: every write
// that grants, renews, releases or withdraws the lock is followed, on the same
// connection to the key's master, by WAIT MinReplicas ReplicaTimeout. It
// renews and releases directly (one pipeline per lock), since WAIT only
// covers the writes of the connection it runs on.
type ackedTokenLock struct {
	tokenLock
	rdb      redis.UniversalClient
	replicas int
	timeout  time.Duration
}

// masterFor returns a client bound to the node that owns key.
func masterFor(ctx context.Context, rdb redis.UniversalClient, key string) (redis.UniversalClient, error) {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, key)
	}
	return rdb, nil
}

// maxAckedRedirects bounds the MOVED and ASK replies one runAcked call
// follows: a failover or a slot migration needs one or two.
const maxAckedRedirects = 5

// runAcked runs c and then WAIT in one pipeline on key's master, falling
// back to EVAL on NOSCRIPT. It returns c's reply and the replicas that
// acknowledged.
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
func (a ackedTokenLock) runAcked(ctx context.Context, rdb redis.UniversalClient, c protocol.Call) (*redis.Cmd, int64, error) {
	node, err := masterFor(ctx, rdb, c.Keys[0])
	if err != nil {
		return nil, 0, err
	}
	cc, _ := rdb.(*redis.ClusterClient)
	asking := false
	for hop := 0; ; hop++ {
		cmd, n, err := a.runOn(ctx, node, c, asking)
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

// runOn runs c and then WAIT in one pipeline on node (after ASKING if
// asking: an ASK redirection), falling back to EVAL on NOSCRIPT.
func (a ackedTokenLock) runOn(ctx context.Context, node redis.UniversalClient, c protocol.Call, asking bool) (*redis.Cmd, int64, error) {
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
			wait = p.Do(ctx, "wait", a.replicas, a.timeout.Milliseconds())
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

func (a ackedTokenLock) ackErr(n int64) error {
	return fmt.Errorf("%w: %d of %d within %v", ErrReplicaAck, n, a.replicas, a.timeout)
}

func (a ackedTokenLock) Acquire(ctx context.Context, at engine.Attempt, k protocol.Keys, token string, ttl time.Duration) (engine.Grant, error) {
	cmd, n, err := a.runAcked(ctx, a.rdb, a.acquireCall(at, k, token, ttl))
	if err != nil {
		return engine.Grant{Grant: protocol.Grant{Value: token}}, err
	}
	g, err := a.grant(token, cmd)
	if err != nil || !g.Acquired {
		return g, err
	}
	if n < int64(a.replicas) {
		// Never report a grant a failover could lose: give it back, at
		// once on the master (the engine withdraws the token again, in the
		// background, until replicas acknowledge it: see LeaveDirect).
		return engine.Grant{}, oneline.Join(a.ackErr(n), engine.Withdraw(ctx, at.On(), a.tokenLock, k, token))
	}
	return g, nil
}

// RenewDirect extends the lock and waits for the replicas. A renewal they
// did not acknowledge is an error: the deadline does not move, and the
// lock is lost at its deadline unless a later renewal is acknowledged.
func (a ackedTokenLock) RenewDirect(ctx context.Context, k protocol.Keys, token string, ttl time.Duration) (string, int64, error) {
	c, next := a.Renew(k, token, ttl)
	cmd, n, err := a.runAcked(ctx, a.rdb, c)
	if err != nil {
		return next, 0, err
	}
	code, err := cmd.Int64()
	if err == nil && code == codeOK && n < int64(a.replicas) {
		err = a.ackErr(n)
	}
	return next, code, err
}

// ReleaseDirect releases the lock and waits for the replicas, as a grant
// does: a release a master accepted just before a failover, which no
// replica saw, is lost with that master, and the promoted replica keeps
// the token until its TTL. A release that ran but that fewer than
// MinReplicas replicas acknowledged answers codeOK with ErrReplicaAck: it
// is not confirmed, and the engine sends it again (releaseRetry, within
// ReleaseTimeout) until the replicas acknowledge it. A second run is
// harmless: the release is token-checked, and a run that finds the
// tombstone of one that ran answers codeOK (internal/lualib/queue.lua).
func (a ackedTokenLock) ReleaseDirect(ctx context.Context, k protocol.Keys, token string) (int64, error) {
	cmd, n, err := a.runAcked(ctx, a.rdb, a.Release(k, token))
	if err != nil {
		return 0, err
	}
	code, err := cmd.Int64()
	if err == nil && code == codeOK && n < int64(a.replicas) {
		err = a.ackErr(n)
	}
	return code, err
}

// LeaveDirect withdraws token (a waiter that gave up, an acquire whose
// reply was lost: see engine.Withdraw) and waits for the replicas, as a
// grant does. The withdrawal's tombstone is what refuses an acquire of
// token that lands late (internal/lualib/queue.lua); one that no replica
// saw is lost with a master that fails over, and the late acquire would
// then be granted on the promoted replica and hold the key for nobody
// until its TTL. A withdrawal that fewer than MinReplicas replicas
// acknowledged returns ErrReplicaAck, and the caller sends it again
// (within ReleaseTimeout in the background). A second run is harmless:
// the leave is token-checked and writes the same tombstone.
func (a ackedTokenLock) LeaveDirect(ctx context.Context, k protocol.Keys, token string) error {
	_, n, err := a.runAcked(ctx, a.rdb, a.Leave(k, token))
	if err != nil {
		return err
	}
	if n < int64(a.replicas) {
		return a.ackErr(n)
	}
	return nil
}
