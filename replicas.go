package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// ackedTokenLock is the token lock with Options.MinReplicas: every write
// that grants or renews the lock is followed, on the same connection to the
// key's master, by WAIT MinReplicas ReplicaTimeout. It renews and releases
// directly (one pipeline per lock), since WAIT only covers the writes of
// the connection it runs on.
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

// runAcked runs c and then WAIT in one pipeline on key's master, falling
// back to EVAL on NOSCRIPT. It returns c's reply and the replicas that
// acknowledged.
func (a ackedTokenLock) runAcked(ctx context.Context, rdb redis.UniversalClient, c protocol.Call) (*redis.Cmd, int64, error) {
	node, err := masterFor(ctx, rdb, c.Keys[0])
	if err != nil {
		return nil, 0, err
	}
	var cmd *redis.Cmd
	var wait *redis.Cmd
	pipe := func(eval bool) {
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
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
	if isNoScript(cmd.Err()) {
		pipe(true)
	}
	if cmd.Err() != nil {
		return cmd, 0, cmd.Err()
	}
	n, err := wait.Int64()
	return cmd, n, err
}

func (a ackedTokenLock) ackErr(n int64) error {
	return fmt.Errorf("%w: %d of %d within %v", ErrReplicaAck, n, a.replicas, a.timeout)
}

func (a ackedTokenLock) Acquire(ctx context.Context, rdb redis.UniversalClient, k protocol.Keys, token string, ttl time.Duration) (protocol.Grant, error) {
	cmd, n, err := a.runAcked(ctx, rdb, a.acquireCall(k, token, ttl))
	if err != nil {
		return protocol.Grant{Value: token}, err
	}
	g, err := a.grant(token, cmd)
	if err != nil || !g.Acquired {
		return g, err
	}
	if n < int64(a.replicas) {
		// Never report a grant a failover could lose: give it back.
		return protocol.Grant{}, errors.Join(a.ackErr(n), withdraw(ctx, rdb, a, k, token))
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

func (a ackedTokenLock) ReleaseDirect(ctx context.Context, k protocol.Keys, token string) (int64, error) {
	return runScript(ctx, a.rdb, a.Release(k, token)).Int64()
}
