package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/oneline"
	"github.com/dlock-go/dlock/internal/rexec"
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

func (a ackedTokenLock) ackErr(n int64) error {
	return fmt.Errorf("%w: %d of %d within %v", ErrReplicaAck, n, a.replicas, a.timeout)
}

func (a ackedTokenLock) Acquire(ctx context.Context, at engine.Attempt, k protocol.Keys, token string, ttl time.Duration) (engine.Grant, error) {
	cmd, n, err := rexec.RunAcked(ctx, a.rdb, a.acquireCall(at, k, token, ttl), a.replicas, a.timeout)
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
	cmd, n, err := rexec.RunAcked(ctx, a.rdb, c, a.replicas, a.timeout)
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
	cmd, n, err := rexec.RunAcked(ctx, a.rdb, a.Release(k, token), a.replicas, a.timeout)
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
	_, n, err := rexec.RunAcked(ctx, a.rdb, a.Leave(k, token), a.replicas, a.timeout)
	if err != nil {
		return err
	}
	if n < int64(a.replicas) {
		return a.ackErr(n)
	}
	return nil
}
