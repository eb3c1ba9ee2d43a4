package dlock_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/redis/go-redis/v9"
)

// firstSendElsewhere runs the first pipeline holding a call of the
// script named script on another connection (side), without its WAIT,
// and reports it to the caller as a connection that broke before the
// reply: the call ran on a connection that is gone, and the caller's
// next send goes on another one.
type firstSendElsewhere struct {
	side   *redis.Client
	script string
	fired  atomic.Int64
}

func (*firstSendElsewhere) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*firstSendElsewhere) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *firstSendElsewhere) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, h.matches) || !h.fired.CompareAndSwap(0, 1) {
			return next(ctx, cmds)
		}
		for _, cmd := range cmds {
			if strings.EqualFold(cmd.Name(), "wait") {
				continue
			}
			if err := h.side.Do(ctx, cmd.Args()...).Err(); lualib.IsNoScript(err) {
				h.fired.Store(0) // the caller sends it again by EVAL
				return next(ctx, cmds)
			} else if err != nil {
				return err
			}
		}
		for _, cmd := range cmds {
			cmd.SetErr(io.ErrUnexpectedEOF)
		}
		return io.ErrUnexpectedEOF
	}
}

func (h *firstSendElsewhere) matches(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	s, _ := args[1].(string)
	switch strings.ToLower(cmd.Name()) {
	case "evalsha", "fcall":
		return probe.ScriptName(s) == h.script
	case "eval":
		return probe.ScriptNameOfSource(s) == h.script
	}
	return false
}

// TestMinReplicasResentReleaseWaitsForTheFirstRun: with MinReplicas, a
// release that ran on a connection that broke before its reply is sent
// again; the second run finds the first one's tombstone and answers
// released. Its WAIT must cover the first run's delete, which it only
// does if the second run writes too: WAIT waits for the replicas to reach
// the offset of the last write of its own connection. A replica that has
// not received the delete (paused here) must keep the release
// unconfirmed, as it keeps a first run's. (A connection's WAIT covers the
// server's writes up to its last command on Redis 7.0, but only its own
// writes on Valkey 8 and Redis 7.2 or later: run it on one of those too.)
func TestMinReplicasResentReleaseWaitsForTheFirstRun(t *testing.T) {
	ctx := t.Context()
	master, replica := primaryWithReplica(t)
	rdb := master.NewClient()
	hook := &firstSendElsewhere{side: master.Client(t), script: "release"}
	rdb.AddHook(hook)
	a, _ := newClientOn(t, rdb, dlock.Options{MinReplicas: 1, ReplicaTimeout: time.Second,
		ReleaseTimeout: 1500 * time.Millisecond})
	lk, err := a.Lock(ctx, "job", dlock.WithTTL(time.Minute), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	// The replica acknowledged the grant, and everything after it; from
	// now on it acknowledges nothing, and receives nothing.
	replicaCaughtUp(t, rdb)
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := replica.Resume(); err != nil {
				t.Error(err)
			}
		}
	}
	defer resume()
	err = lk.Unlock(ctx)
	if hook.fired.Load() == 0 {
		t.Fatal("the first release was not sent on another connection")
	}
	if n, xerr := rdb.Exists(ctx, "job").Result(); xerr != nil || n != 0 {
		t.Fatalf("the release did not run on the master: %d, %v", n, xerr)
	}
	if err == nil {
		t.Fatal("Unlock confirmed a release no replica acknowledged: the resent release's WAIT did not wait for the first run's delete")
	}
	if !errors.Is(err, dlock.ErrReplicaAck) {
		t.Fatalf("Unlock = %v, want ErrReplicaAck", err)
	}
	resume()
	// Acknowledged once the replica is back: a later Unlock confirms it.
	if err := lk.Unlock(ctx); err != nil {
		t.Fatalf("Unlock once the replica is back: %v", err)
	}
}

// replicaCaughtUp waits until the one replica of rdb's master has
// acknowledged the master's whole replication stream.
func replicaCaughtUp(t *testing.T, rdb *redis.Client) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info := rdb.Info(t.Context(), "replication").Val()
		var master, acked int64 = -1, -2
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
				master, _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(line, "slave0:"); ok {
				for _, f := range strings.Split(v, ",") {
					if o, ok := strings.CutPrefix(f, "offset="); ok {
						acked, _ = strconv.ParseInt(o, 10, 64)
					}
				}
			}
		}
		if master == acked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica never caught up:\n%s", info)
		}
	}
}
