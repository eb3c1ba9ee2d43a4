package rexec

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Redis Functions. Where the server has them, an Exec runs package
// dlock's scripts by FCALL of their functions in one library
// (scripts.Lib), which it loads itself: its first call finds the function
// missing ("ERR Function not found"), FUNCTION LOAD loads the library, on
// every master of a Cluster and every shard of a Ring, and the call is
// sent again. The same happens wherever the library is gone: a master
// restarted without persistence, a new master of a resharded Cluster,
// FUNCTION FLUSH. Concurrent calls that met the same absence load it
// once. Functions replicate: a promoted replica has the library.
//
// An FCALL that did not run is sent by EVALSHA instead (EVAL on NOSCRIPT,
// as before Functions), for that call:
//   - the library could not be loaded, or the function is still missing
//     after the load (a node the load did not reach);
//   - the server refused it before it ran as it refuses writes while
//     over maxmemory, short of min-replicas-to-write or after a failed
//     save (OOM, NOREPLICAS, MISCONF): a function that may write is
//     refused whole where a script's writes are checked one by one, so a
//     script that frees memory (a release) or only reads still runs.
//     (A replica's READONLY is not among them: dlock's calls are for a
//     master, and the engine handles READONLY as it always has.)
// and for every later call of the Exec too:
//   - the server does not know FCALL or FUNCTION (Redis 6, or a command
//     renamed away), or the ACL denies either (a user without +fcall or
//     +function|load): EVALSHA from then on.
// Other scripts (package redlock's, package legacy's, a user's Protocol's)
// always run by EVALSHA.

// funcs is an Exec's state of Functions.
type funcs struct {
	off atomic.Bool   // EVALSHA only (see NoFunctions and the refusals above)
	gen atomic.Uint64 // loads of the library done
	mu  sync.Mutex    // one load at a time
}

// NoFunctions makes x run every script by EVALSHA, never FCALL. Call it
// before x is used.
func (x *Exec) NoFunctions() { x.fn.off.Store(true) }

// Functions reports whether x runs package dlock's scripts by FCALL: true
// until NoFunctions or a server that refused Functions.
func (x *Exec) Functions() bool { return !x.fn.off.Load() }

// fcallCmd returns the FCALL command of c, whose function is fn.
func fcallCmd(ctx context.Context, fn any, c protocol.Call) *redis.Cmd {
	args := make([]any, 3+len(c.Keys)+len(c.Args))
	args[0], args[1], args[2] = "fcall", fn, len(c.Keys)
	for i, k := range c.Keys {
		args[3+i] = k
	}
	copy(args[3+len(c.Keys):], c.Args)
	cmd := redis.NewCmd(ctx, args...)
	if len(c.Keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// asFcall turns r into its FCALL, if r is a call of one of package dlock's
// scripts, and reports whether it did.
func (r Raw) asFcall() bool {
	if s, ok := r.Args[0].(string); ok && s == "fcall" {
		return true // sent again after loading the library
	}
	e, ok := scripts.ByHash(r.Args[1])
	if !ok {
		return false
	}
	r.Args[0], r.Args[1] = "fcall", e.FuncArg()
	return true
}

// asEvalSha turns r, an FCALL made by asFcall, back into its EVALSHA.
func (r Raw) asEvalSha() {
	if r.Args == nil {
		return
	}
	if s, ok := r.Args[0].(string); ok && s == "fcall" {
		if e, ok := scripts.ByFunc(r.Args[1]); ok {
			r.Args[0], r.Args[1] = "evalsha", e.ShaArg()
		}
	}
}

// isFcall reports whether cmd is an FCALL.
func isFcall(cmd *redis.Cmd) bool {
	s, ok := cmd.Args()[0].(string)
	return ok && s == "fcall"
}

// one runs c (or r, if it has arguments), one of package dlock's scripts,
// by itself: by FCALL where x uses Functions, else (or where the FCALL
// did not run, see above) by EVALSHA, then EVAL on NOSCRIPT.
func (x *Exec) one(ctx context.Context, c protocol.Call, r Raw) *redis.Cmd {
	if x.fn.off.Load() {
		return x.evalSha(ctx, c, r)
	}
	gen := x.fn.gen.Load()
	cmd, ok := x.fcall(ctx, c, r)
	if !ok {
		return x.evalSha(ctx, c, r)
	}
	_ = x.rdb.Process(ctx, cmd)
	if lualib.IsNoFunction(cmd.Err()) && x.loadLib(ctx, gen) {
		cmd, _ = x.fcall(ctx, c, r)
		_ = x.rdb.Process(ctx, cmd)
	}
	if x.evalInstead(cmd.Err()) {
		r.asEvalSha()
		return x.evalSha(ctx, c, r)
	}
	return cmd
}

// fcall returns the FCALL of c (or of r, which it turns into one), and
// false for a script of no function.
func (x *Exec) fcall(ctx context.Context, c protocol.Call, r Raw) (*redis.Cmd, bool) {
	if r.Args != nil {
		if !r.asFcall() {
			return nil, false
		}
		return r.cmd(ctx), true
	}
	fn, ok := scripts.FuncArg(c.Script)
	if !ok {
		return nil, false
	}
	return fcallCmd(ctx, fn, c), true
}

// evalSha runs c (or r) by EVALSHA, then EVAL on NOSCRIPT.
func (x *Exec) evalSha(ctx context.Context, c protocol.Call, r Raw) *redis.Cmd {
	if r.Args != nil {
		return r.run(ctx, x.rdb)
	}
	return c.Run(ctx, x.rdb)
}

// evalInstead reports whether an FCALL that failed with err did not run
// and is to be sent by EVALSHA instead (see above); it turns Functions
// off for x where the server refuses them for good.
func (x *Exec) evalInstead(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) || ScriptRaised(re) {
		return false
	}
	msg := re.Error()
	if refusedForGood(msg) {
		x.fn.off.Store(true)
		return true
	}
	if lualib.IsNoFunction(err) {
		return true
	}
	for _, code := range [...]string{"OOM", "NOREPLICAS", "MISCONF"} {
		if strings.HasPrefix(msg, code+" ") {
			return true
		}
	}
	return false
}

// refusedForGood reports whether the error reply msg to FCALL or FUNCTION
// LOAD says the server will never run them for this client: an unknown
// command, or one the ACL denies.
func refusedForGood(msg string) bool {
	if strings.HasPrefix(msg, "ERR unknown command") {
		return true
	}
	m := strings.ToLower(msg)
	return strings.HasPrefix(m, "noperm") && (strings.Contains(m, "'fcall") || strings.Contains(m, "'function"))
}

// loadLib loads the library, unless a load finished since gen (read
// before the FCALL that found it missing), and reports whether the
// library may be there now.
func (x *Exec) loadLib(ctx context.Context, gen uint64) bool {
	x.fn.mu.Lock()
	defer x.fn.mu.Unlock()
	if x.fn.gen.Load() != gen {
		return true
	}
	err := x.loadEverywhere(ctx)
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) && refusedForGood(re.Error()) {
			x.fn.off.Store(true)
		}
		return false
	}
	x.fn.gen.Add(1)
	return true
}

// loadEverywhere loads the library on every master of a Cluster, every
// shard of a Ring, or rdb's server.
func (x *Exec) loadEverywhere(ctx context.Context) error {
	lib := scripts.Lib()
	switch c := x.rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return loadOn(ctx, m, lib) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, s *redis.Client) error { return loadOn(ctx, s, lib) })
	}
	return loadOn(ctx, x.rdb, lib)
}

// loadOn loads lib on rdb's server; a library of that name there already
// is lib (its name is its version).
func loadOn(ctx context.Context, rdb redis.Cmdable, lib scripts.Library) error {
	err := rdb.FunctionLoad(ctx, lib.Code).Err()
	if err != nil && strings.HasPrefix(err.Error(), "ERR Library '"+lib.Name+"' already exists") {
		return nil
	}
	return err
}

// sendFuncs completes a pipeline of FCALLs (Send): the calls that found
// their function missing are sent again once the library is loaded, and
// the FCALLs that did not run, by EVALSHA (see above). gen is the count
// of loads read before the pipeline was sent.
func (x *Exec) sendFuncs(ctx context.Context, calls []protocol.Call, raw []Raw, cmds []*redis.Cmd, gen uint64) {
	var missing []int
	for i, cmd := range cmds {
		if isFcall(cmd) && lualib.IsNoFunction(cmd.Err()) {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 && x.loadLib(ctx, gen) {
		x.pipe(ctx, missing, cmds, func(p redis.Pipeliner, i int) *redis.Cmd {
			cmd, _ := x.fcall(ctx, calls[i], rawAt(raw, i))
			_ = p.Process(ctx, cmd)
			return cmd
		})
	}
	var eval []int
	for i, cmd := range cmds {
		if isFcall(cmd) && x.evalInstead(cmd.Err()) {
			eval = append(eval, i)
		}
	}
	if len(eval) > 0 {
		x.pipe(ctx, eval, cmds, func(p redis.Pipeliner, i int) *redis.Cmd {
			r := rawAt(raw, i)
			r.asEvalSha()
			return evalShaOn(ctx, p, calls[i], r)
		})
	}
}

// evalShaOn queues the EVALSHA of c (or of r, if it has arguments) on p.
func evalShaOn(ctx context.Context, p redis.Pipeliner, c protocol.Call, r Raw) *redis.Cmd {
	if r.Args != nil {
		cmd := r.cmd(ctx)
		_ = p.Process(ctx, cmd)
		return cmd
	}
	return c.Script.EvalSha(ctx, p, c.Keys, c.Args...)
}

// pipe sends, in one pipeline, the command build queues for each index of
// idx (every index of cmds if idx is nil), and stores it in cmds.
func (x *Exec) pipe(ctx context.Context, idx []int, cmds []*redis.Cmd, build func(p redis.Pipeliner, i int) *redis.Cmd) {
	_, _ = x.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if idx == nil {
			for i := range cmds {
				cmds[i] = build(p, i)
			}
			return nil
		}
		for _, i := range idx {
			cmds[i] = build(p, i)
		}
		return nil
	})
}

// rawAt returns raw[i], or no Raw.
func rawAt(raw []Raw, i int) Raw {
	if raw == nil {
		return Raw{}
	}
	return raw[i]
}
