// Package rexec runs the script calls of package dlock on its Redis
// client. It owns the command-execution layer of the engine:
//
//   - the caller pipeline (pipeline.go): each Client's Exec sends a call at
//     once while few are in flight, and batches the calls of concurrent
//     callers into one go-redis pipeline when every writer is busy;
//   - bulk and raw calls (calls.go): several calls in one pipeline, and a
//     call built as its EVALSHA arguments;
//   - Redis Functions (funcs.go): package dlock's scripts run by FCALL of
//     one function library where the server has Functions, which the Exec
//     loads where it is missing; by EVALSHA elsewhere;
//   - NOSCRIPT handling, once: a script the server does not have (after a
//     restart, a failover or SCRIPT FLUSH) is sent again by EVAL;
//   - the refusal retry (refusal.go): a call a Cluster node refused before
//     running it (TRYAGAIN, ASK, MOVED, CLUSTERDOWN, LOADING, MASTERDOWN)
//     is sent again within the caller's deadline, and counted;
//   - acknowledged calls (acked.go): a call and WAIT in one pipeline on
//     its key's master, for Options.MinReplicas.
//
// It knows nothing of locks, leases or the Client: the engine decides
// what to send and reads the replies.
package rexec

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Exec runs script calls on one Redis client. A Client owns one; the
// calls of one Exec share its pipeline and its count of refusals.
type Exec struct {
	rdb     redis.UniversalClient
	writers int // calls or batches in flight at most, before calls queue

	mu      sync.Mutex
	active  int       // calls or batches in flight
	pending []*pended // calls waiting for a writer, oldest first

	refusals atomic.Uint64 // tries Redis refused (see refusal.go)

	fn funcs // Redis Functions (see funcs.go)

	// closing, once closed, ends the back-off of refused calls, which
	// then fail with closed (see EndRefusalsOn); nil: never.
	closing <-chan struct{}
	closed  error
}

// New returns an Exec over rdb.
func New(rdb redis.UniversalClient) *Exec {
	return &Exec{rdb: rdb, writers: pipelineWriters()}
}

// pipelineWriters is how many calls or batches one Exec has in flight at
// most before calls are batched. Few writers make large batches (one
// write and one read for many calls, on the client and on Redis); more
// than one lets a batch form while another is in flight, and a slow reply
// (a paused server, a busy machine) does not stall every caller.
func pipelineWriters() int { return max(4, runtime.GOMAXPROCS(0)) }

// EndRefusalsOn makes the refused calls of x stop being sent again once
// closing is closed (the Client closes): one waiting to be sent again
// then fails at once with an error that matches closed and reads as the
// last refusal, instead of at its bound; a call whose ctx came from
// OutlivingClose keeps its bound. Call it before x is used.
func (x *Exec) EndRefusalsOn(closing <-chan struct{}, closed error) {
	x.closing, x.closed = closing, closed
}

// Refusals returns how many tries of x's calls Redis refused.
func (x *Exec) Refusals() uint64 { return x.refusals.Load() }

// Refused counts n tries Redis refused that the caller does not retry
// here (see Send).
func (x *Exec) Refused(n int) { x.refusals.Add(uint64(n)) }

// Run executes c: FCALL where x uses Functions and c is one of package
// dlock's scripts (see funcs.go), else EVALSHA, then EVAL on NOSCRIPT. A
// call of one of package dlock's scripts (those of internal/scripts) goes through x's
// pipeline, batched with the concurrent calls of other goroutines when
// its writers are busy; ctx still bounds the wait for the reply. Other
// scripts (package redlock's, package legacy's, a user's Protocol's) run
// by themselves (Call.Run), as their code expects.
//
// A call Redis refused before running it (a Cluster slot migrating, a
// failover) is sent again until it runs or ctx's bound (see refusal.go).
func (x *Exec) Run(ctx context.Context, c protocol.Call) *redis.Cmd {
	own := scripts.Owns(c.Script)
	cmd := x.call(ctx, c, own)
	if cmd.Err() != nil {
		cmd = x.retryRefused(ctx, cmd, func() *redis.Cmd { return x.call(ctx, c, own) })
	}
	return cmd
}

// call sends c once: through the pipeline if own.
func (x *Exec) call(ctx context.Context, c protocol.Call, own bool) *redis.Cmd {
	if own {
		return x.run(ctx, c, Raw{})
	}
	return c.Run(ctx, x.rdb)
}

// RunRaw is Run for a call of one of package dlock's scripts built as its
// EVALSHA arguments (see Raw).
func (x *Exec) RunRaw(ctx context.Context, r Raw) *redis.Cmd {
	cmd := x.run(ctx, protocol.Call{}, r)
	if cmd.Err() != nil {
		cmd = x.retryRefused(ctx, cmd, func() *redis.Cmd { return x.run(ctx, protocol.Call{}, r) })
	}
	return cmd
}
