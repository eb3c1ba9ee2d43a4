package rexec

import (
	"context"
	"slices"

	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Caller pipelining. Every call of one of package dlock's scripts that an
// Exec runs (Run, RunRaw) goes through its pipeline: while fewer than
// writers calls or batches are in flight, a call is sent at once, alone,
// by its own goroutine, exactly as without the pipeline (no added delay
// for one goroutine). When every writer is busy, calls wait in a pending
// list, and the first writer that gets free sends all of them as one
// go-redis pipeline (one write, one read for the batch; a ClusterClient
// or Ring splits it per node or shard), runs any that met NOSCRIPT again
// by EVAL (or, by FCALL, a missing function after loading the library:
// see funcs.go), and hands each reply to its caller.
//
// Each caller's ctx bounds its own wait. A caller that leaves before its
// call was taken into a batch takes it back: it was never sent, and the
// caller gets ctx's error. A caller that leaves while its call is in
// flight gets ctx's error as well, which is ambiguous (not a reply from
// Redis): the engine withdraws an acquire's token, or retries a release,
// exactly as after a lost reply; the reply that comes later is dropped.
//
// Each Client has its own Exec, so its own writers: Clients over the same
// Redis client do not share a pipeline.

// pended is one call waiting in a pipeline.
type pended struct {
	ctx   context.Context
	call  protocol.Call
	raw   Raw // call as built arguments, if they are set
	cmd   *redis.Cmd
	taken bool          // a writer took it (guarded by Exec.mu)
	done  chan struct{} // closed when cmd holds the reply
}

// maxBatch bounds the calls of one batch.
const maxBatch = 512

// Writers is how many calls or batches x has in flight at most before
// further calls wait to be batched.
func (x *Exec) Writers() int { return x.writers }

// Pending is how many calls wait in x's pipeline for a writer.
func (x *Exec) Pending() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.pending)
}

// run sends c (or r, if it has arguments) and returns its reply, or ctx's
// error if ctx ends first.
func (x *Exec) run(ctx context.Context, c protocol.Call, r Raw) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		return errCmd(ctx, err)
	}
	x.mu.Lock()
	if x.active < x.writers && len(x.pending) == 0 {
		x.active++
		x.mu.Unlock()
		defer func() {
			x.mu.Lock()
			x.doneLocked()
			x.mu.Unlock()
		}()
		return x.one(ctx, c, r)
	}
	pc := &pended{ctx: ctx, call: c, raw: r, done: make(chan struct{})}
	x.pending = append(x.pending, pc)
	if x.active < x.writers {
		x.active++
		go x.flush()
	}
	x.mu.Unlock()
	select {
	case <-pc.done:
		return pc.cmd
	case <-ctx.Done():
	}
	x.mu.Lock()
	if !pc.taken {
		if i := slices.Index(x.pending, pc); i >= 0 {
			x.pending = slices.Delete(x.pending, i, i+1) // zeroes the freed slot
		}
	}
	x.mu.Unlock()
	select {
	case <-pc.done: // the reply came meanwhile
		return pc.cmd
	default:
	}
	return errCmd(ctx, ctx.Err())
}

// doneLocked ends one writer's turn: it goes on as a flusher if calls are
// waiting, else its slot is free.
func (x *Exec) doneLocked() {
	if len(x.pending) > 0 {
		go x.flush()
		return
	}
	x.active--
}

// flush sends the pending calls in batches until none is left.
func (x *Exec) flush() {
	for {
		x.mu.Lock()
		n := min(len(x.pending), maxBatch)
		if n == 0 {
			x.active--
			x.mu.Unlock()
			return
		}
		batch := make([]*pended, n)
		copy(batch, x.pending)
		x.pending = slices.Delete(x.pending, 0, n) // keeps no reference to a sent call
		for _, pc := range batch {
			pc.taken = true
		}
		x.mu.Unlock()
		x.send(batch)
	}
}

// send runs one batch and hands each reply to its caller. The batch is
// not bounded by any one caller's ctx (each caller bounds its own wait);
// it keeps the first caller's values (tracing hooks) and go-redis's
// timeouts bound it.
func (x *Exec) send(batch []*pended) {
	ctx := context.WithoutCancel(batch[0].ctx)
	if len(batch) == 1 {
		pc := batch[0]
		pc.cmd = x.one(ctx, pc.call, pc.raw)
		close(pc.done)
		return
	}
	calls := make([]protocol.Call, len(batch))
	var raw []Raw
	for i, pc := range batch {
		calls[i] = pc.call
		if pc.raw.Args != nil {
			if raw == nil {
				raw = make([]Raw, len(batch))
			}
			raw[i] = pc.raw
		}
	}
	cmds := x.Send(ctx, calls, raw)
	for i, pc := range batch {
		pc.cmd = cmds[i]
		close(pc.done)
	}
}

// errCmd is a Cmd that failed with err before it was sent.
func errCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
