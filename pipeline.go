package dlock

import (
	"context"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Caller pipelining. Every script call a Client makes on its Redis client
// (Call.Run) goes through that Redis client's pipeline: while fewer than
// pipeline.writers calls or batches are in flight, a call is sent at once,
// alone, by its own goroutine, exactly as without the pipeline (no added
// delay for one goroutine). When every writer is busy, calls wait in a
// pending list, and the first writer that gets free sends all of them as
// one go-redis pipeline (one write, one read for the batch; a
// ClusterClient or Ring splits it per node or shard), runs any that met
// NOSCRIPT again by EVAL, and hands each reply to its caller.
//
// Each caller's ctx bounds its own wait. A caller that leaves before its
// call was taken into a batch takes it back: it was never sent, and the
// caller gets ctx's error. A caller that leaves while its call is in
// flight gets ctx's error as well, which is ambiguous (not a reply from
// Redis): the engine withdraws an acquire's token, or retries a release,
// exactly as after a lost reply; the reply that comes later is dropped.
//
// Clients over the same Redis client share its pipeline (see pipelineFor).
type pipeline struct {
	rdb     redis.UniversalClient
	writers int // calls or batches in flight at most, before calls queue

	mu      sync.Mutex
	active  int       // calls or batches in flight
	pending []*pended // calls waiting for a writer, oldest first
	users   int       // Clients using this pipeline (guarded by pipesMu)

	refusals atomic.Uint64 // tries Redis refused (see refusal.go), for Stats
}

// pended is one call waiting in a pipeline.
type pended struct {
	ctx   context.Context
	call  protocol.Call
	raw   rawCall // call as built arguments, if they are set
	cmd   *redis.Cmd
	taken bool          // a writer took it (guarded by pipeline.mu)
	done  chan struct{} // closed when cmd holds the reply
}

// maxBatch bounds the calls of one batch.
const maxBatch = 512

// pipelineWriters is how many calls or batches one Redis client has in
// flight at most before calls are batched. Few writers make large batches
// (one write and one read for many calls, on the client and on Redis);
// more than one lets a batch form while another is in flight, and a slow
// reply (a paused server, a busy machine) does not stall every caller.
func pipelineWriters() int { return max(4, runtime.GOMAXPROCS(0)) }

var (
	pipesMu sync.Mutex
	pipes   sync.Map // redis.UniversalClient -> *pipeline
)

// pipelineFor returns rdb's pipeline, creating it for its first Client;
// dropPipeline undoes it when that Client closes.
func pipelineFor(rdb redis.UniversalClient) *pipeline {
	if !pointerKey(rdb) {
		// Not a usable map key: this Client's calls run by themselves.
		return &pipeline{rdb: rdb, writers: pipelineWriters(), users: 1}
	}
	pipesMu.Lock()
	defer pipesMu.Unlock()
	if v, ok := pipes.Load(rdb); ok {
		p := v.(*pipeline)
		p.users++
		return p
	}
	p := &pipeline{rdb: rdb, writers: pipelineWriters(), users: 1}
	pipes.Store(rdb, p)
	return p
}

func dropPipeline(p *pipeline) {
	if !pointerKey(p.rdb) {
		return
	}
	pipesMu.Lock()
	defer pipesMu.Unlock()
	if p.users--; p.users == 0 {
		pipes.CompareAndDelete(p.rdb, p)
	}
}

// pipelineOf returns the pipeline of rdb, nil if no open Client uses rdb.
func pipelineOf(rdb redis.Scripter) *pipeline {
	u, ok := rdb.(redis.UniversalClient)
	if !ok || !pointerKey(u) {
		return nil
	}
	v, ok := pipes.Load(u)
	if !ok {
		return nil
	}
	return v.(*pipeline)
}

// pointerKey reports whether rdb is a pointer, so it can key the pipeline
// registry (another type implementing UniversalClient may not be
// comparable, and hashing it would panic).
func pointerKey(rdb any) bool {
	switch rdb.(type) {
	case *redis.Client, *redis.ClusterClient, *redis.Ring:
		return true
	}
	t := reflect.TypeOf(rdb)
	return t != nil && t.Kind() == reflect.Pointer
}

// runScript executes c on rdb: EVALSHA, then EVAL on NOSCRIPT. A call of
// one of this package's scripts (those of internal/scripts) on the Redis
// client of an open Client goes through that Redis client's pipeline,
// batched with the concurrent calls of other goroutines when its writers
// are busy; ctx still bounds the wait for the reply. Other scripts (package redlock's, package legacy's, a
// user's Protocol's) run by themselves (Call.Run), as their code expects.
//
// A call Redis refused before running it (a Cluster slot migrating, a
// failover) is sent again until it runs or ctx's bound (see refusal.go).
func runScript(ctx context.Context, rdb redis.Scripter, c protocol.Call) *redis.Cmd {
	if scripts.Owns(c.Script) {
		if p := pipelineOf(rdb); p != nil {
			cmd := p.run(ctx, c, rawCall{})
			if cmd.Err() != nil {
				cmd = retryRefused(ctx, rdb, cmd, func() *redis.Cmd { return p.run(ctx, c, rawCall{}) })
			}
			return cmd
		}
	}
	cmd := c.Run(ctx, rdb)
	if cmd.Err() != nil {
		cmd = retryRefused(ctx, rdb, cmd, func() *redis.Cmd { return c.Run(ctx, rdb) })
	}
	return cmd
}

// runRawScript is runScript for a call of one of this package's scripts
// built as its EVALSHA arguments (see rawCall).
func runRawScript(ctx context.Context, rdb redis.UniversalClient, r rawCall) *redis.Cmd {
	send := func() *redis.Cmd { return r.run(ctx, rdb) }
	if p := pipelineOf(rdb); p != nil {
		send = func() *redis.Cmd { return p.run(ctx, protocol.Call{}, r) }
	}
	cmd := send()
	if cmd.Err() != nil {
		cmd = retryRefused(ctx, rdb, cmd, send)
	}
	return cmd
}

// run sends c (or r, if it has arguments) and returns its reply, or ctx's
// error if ctx ends first.
func (p *pipeline) run(ctx context.Context, c protocol.Call, r rawCall) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		return errCmd(ctx, err)
	}
	p.mu.Lock()
	if p.active < p.writers && len(p.pending) == 0 {
		p.active++
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			p.doneLocked()
			p.mu.Unlock()
		}()
		if r.args != nil {
			return r.run(ctx, p.rdb)
		}
		return c.Run(ctx, p.rdb)
	}
	pc := &pended{ctx: ctx, call: c, raw: r, done: make(chan struct{})}
	p.pending = append(p.pending, pc)
	if p.active < p.writers {
		p.active++
		go p.flush()
	}
	p.mu.Unlock()
	select {
	case <-pc.done:
		return pc.cmd
	case <-ctx.Done():
	}
	p.mu.Lock()
	if !pc.taken {
		if i := slices.Index(p.pending, pc); i >= 0 {
			p.pending = slices.Delete(p.pending, i, i+1) // zeroes the freed slot
		}
	}
	p.mu.Unlock()
	select {
	case <-pc.done: // the reply came meanwhile
		return pc.cmd
	default:
	}
	return errCmd(ctx, ctx.Err())
}

// doneLocked ends one writer's turn: it goes on as a flusher if calls are
// waiting, else its slot is free.
func (p *pipeline) doneLocked() {
	if len(p.pending) > 0 {
		go p.flush()
		return
	}
	p.active--
}

// flush sends the pending calls in batches until none is left.
func (p *pipeline) flush() {
	for {
		p.mu.Lock()
		n := min(len(p.pending), maxBatch)
		if n == 0 {
			p.active--
			p.mu.Unlock()
			return
		}
		batch := make([]*pended, n)
		copy(batch, p.pending)
		p.pending = slices.Delete(p.pending, 0, n) // keeps no reference to a sent call
		for _, pc := range batch {
			pc.taken = true
		}
		p.mu.Unlock()
		p.send(batch)
	}
}

// send runs one batch and hands each reply to its caller. The batch is
// not bounded by any one caller's ctx (each caller bounds its own wait);
// it keeps the first caller's values (tracing hooks) and go-redis's
// timeouts bound it.
func (p *pipeline) send(batch []*pended) {
	ctx := context.WithoutCancel(batch[0].ctx)
	if len(batch) == 1 {
		if pc := batch[0]; pc.raw.args != nil {
			pc.cmd = pc.raw.run(ctx, p.rdb)
		} else {
			pc.cmd = pc.call.Run(ctx, p.rdb)
		}
		close(batch[0].done)
		return
	}
	calls := make([]protocol.Call, len(batch))
	var raw []rawCall
	for i, pc := range batch {
		calls[i] = pc.call
		if pc.raw.args != nil {
			if raw == nil {
				raw = make([]rawCall, len(batch))
			}
			raw[i] = pc.raw
		}
	}
	cmds := runRaw(ctx, p.rdb, calls, raw)
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
