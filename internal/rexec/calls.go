package rexec

import (
	"context"

	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Raw is a script call as the arguments of its EVALSHA command ("evalsha",
// sha, numkeys, keys..., args...), and the script's source for the EVAL
// that replaces it on NOSCRIPT: a call whose arguments the engine boxed
// once, sent without the copy go-redis makes of a Call's. Where the Exec
// uses Functions, its first two arguments are replaced by "fcall" and the
// function's name (see funcs.go).
type Raw struct {
	Args []any
	Src  string
}

// Batch runs calls in one go-redis pipeline (split per Cluster node or
// Ring shard by go-redis), re-running by EVAL any call that met NOSCRIPT,
// and sending again any call Redis refused before running it, until it
// runs or ctx's bound (see refusal.go). It returns one Cmd per call, in
// order.
func (x *Exec) Batch(ctx context.Context, calls []protocol.Call) []*redis.Cmd {
	cmds := x.Send(ctx, calls, nil)
	var r *refusals
	for {
		var again []int
		for i, cmd := range cmds {
			if IsRefusal(cmd.Err()) {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			return cmds
		}
		if r == nil {
			r = x.newRefusals(ctx)
		}
		if !r.again(len(again)) {
			for _, i := range again {
				r.fail(cmds[i])
			}
			return cmds
		}
		sub := make([]protocol.Call, len(again))
		for n, i := range again {
			sub[n] = calls[i]
		}
		for n, cmd := range x.Send(ctx, sub, nil) {
			cmds[again[n]] = cmd
		}
	}
}

// Send is Batch without the refusal retry, where calls[i] is sent as
// raw[i] if raw[i] has arguments (raw may be nil): the caller retries, or
// counts (Refused), what Redis refused. Calls of package dlock's scripts
// go by FCALL where x uses Functions (see funcs.go).
func (x *Exec) Send(ctx context.Context, calls []protocol.Call, raw []Raw) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	fn, gen := !x.fn.off.Load(), x.fn.gen.Load()
	x.pipe(ctx, nil, cmds, func(p redis.Pipeliner, i int) *redis.Cmd {
		if fn {
			if cmd, ok := x.fcall(ctx, calls[i], rawAt(raw, i)); ok {
				_ = p.Process(ctx, cmd)
				return cmd
			}
		}
		return evalShaOn(ctx, p, calls[i], rawAt(raw, i))
	})
	if fn {
		x.sendFuncs(ctx, calls, raw, cmds, gen)
	}
	var again []int
	for i, cmd := range cmds {
		if lualib.IsNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		x.pipe(ctx, again, cmds, func(p redis.Pipeliner, i int) *redis.Cmd {
			if r := rawAt(raw, i); r.Args != nil {
				r.Args[0], r.Args[1] = "eval", r.Src
				cmd := r.cmd(ctx)
				_ = p.Process(ctx, cmd)
				return cmd
			}
			return calls[i].Script.Eval(ctx, p, calls[i].Keys, calls[i].Args...)
		})
	}
	return cmds
}

// run executes r on rdb by itself: EVALSHA, then EVAL on NOSCRIPT, as
// Call.Run does.
func (r Raw) run(ctx context.Context, rdb redis.UniversalClient) *redis.Cmd {
	cmd := r.cmd(ctx)
	_ = rdb.Process(ctx, cmd)
	if lualib.IsNoScript(cmd.Err()) {
		r.Args[0], r.Args[1] = "eval", r.Src
		cmd = r.cmd(ctx)
		_ = rdb.Process(ctx, cmd)
	}
	return cmd
}

// cmd returns the command of r: its keys start at its fourth argument (a
// Cluster client routes it by the first).
func (r Raw) cmd(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx, r.Args...)
	if n, _ := r.Args[2].(int); n > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// Pipelined is rdb.Pipelined for a pipeline of reads: if Redis refused
// any of its commands, fn's pipeline is sent again, whole, until none is
// refused or ctx's bound (see refusal.go). fn must assign the commands it
// reads anew each time it runs.
func (x *Exec) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	cmds, err := x.rdb.Pipelined(ctx, fn)
	var r *refusals
	for {
		n := 0
		for _, cmd := range cmds {
			if IsRefusal(cmd.Err()) {
				n++
			}
		}
		if n == 0 {
			return cmds, err
		}
		if r == nil {
			r = x.newRefusals(ctx)
		}
		if !r.again(n) {
			for _, cmd := range cmds {
				if IsRefusal(cmd.Err()) {
					r.fail(cmd)
				}
			}
			return cmds, err
		}
		cmds, err = x.rdb.Pipelined(ctx, fn)
	}
}
