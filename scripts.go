package dlock

import (
	"context"
	_ "embed"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Every script is an embedded .lua file whose header states its KEYS, ARGV
// and replies. Scripts run by EVALSHA; a NOSCRIPT reply (after a restart, a
// failover or SCRIPT FLUSH) falls back to EVAL, which also reloads it.
//
// The scripts/lib/*.lua files define the Lua functions the scripts share
// (fencing, the FIFO wait queue, leased handle sets). libScript puts in
// front of each script only the library definitions it uses, directly or
// through another library function (see lean), so each script is still
// sent as one self-contained body, and Redis does not build closures it
// never calls on every run.
var (
	//go:embed scripts/lib/fence.lua
	libFenceSrc string
	//go:embed scripts/lib/queue.lua
	libQueueSrc string
	//go:embed scripts/lib/holds.lua
	libHoldsSrc string

	//go:embed scripts/acquire.lua
	acquireSrc string
	//go:embed scripts/extend.lua
	extendSrc string
	//go:embed scripts/release.lua
	releaseSrc string

	acquireScript = libScript(acquireSrc)
	extendScript  = redis.NewScript(libExtendSrc + "\n" + extendSrc)
	releaseScript = libScript(releaseSrc)
)

// libScript returns the script src with the library definitions it uses in
// front. extra are further library files, for scripts of one primitive;
// they come after the shared ones and may use them.
func libScript(src string, extra ...string) *redis.Script {
	return redis.NewScript(lean(src, append([]string{libFenceSrc, libQueueSrc, libHoldsSrc}, extra...)...))
}

// libDef is one top-level definition of a library file: a local function,
// or a line of local constants.
type libDef struct {
	names []string // what it defines
	body  string   // its code, comment lines dropped
	refs  []string // the identifiers its code mentions
}

var (
	libFuncRE  = regexp.MustCompile(`^local\s+function\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(`)
	libConstRE = regexp.MustCompile(`^local\s+([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)\s*=`)
	luaIdentRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// parseLib splits library files into their top-level definitions, in
// order. A definition starts at a line "local function name(" or
// "local A, B = ..." in the first column and runs to the next one; comment
// lines and blank lines are dropped.
func parseLib(files ...string) []libDef {
	var defs []libDef
	for _, f := range files {
		cur := -1
		for _, line := range strings.Split(f, "\n") {
			var names []string
			if m := libFuncRE.FindStringSubmatch(line); m != nil {
				names = []string{m[1]}
			} else if m := libConstRE.FindStringSubmatch(line); m != nil {
				for _, n := range strings.Split(m[1], ",") {
					names = append(names, strings.TrimSpace(n))
				}
			}
			if names != nil {
				defs = append(defs, libDef{names: names})
				cur = len(defs) - 1
			}
			t := strings.TrimSpace(line)
			if cur < 0 || t == "" || strings.HasPrefix(t, "--") {
				continue
			}
			defs[cur].body += line + "\n"
		}
	}
	for i := range defs {
		defs[i].refs = luaIdents(defs[i].body)
	}
	return defs
}

// luaIdents returns the identifiers in code, its comment lines skipped.
func luaIdents(code string) []string {
	var ids []string
	for _, line := range strings.Split(code, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		ids = append(ids, luaIdentRE.FindAllString(line, -1)...)
	}
	return ids
}

// lean returns src preceded by the definitions of libs that src uses,
// directly or through other definitions, in the libraries' order (each
// definition comes after those it uses, as Lua's local scoping needs). The
// result depends only on its inputs, so a script's SHA1 is the same in
// every process of one version.
func lean(src string, libs ...string) string {
	defs := parseLib(libs...)
	byName := map[string]int{}
	for i, d := range defs {
		for _, n := range d.names {
			byName[n] = i
		}
	}
	use := make([]bool, len(defs))
	var visit func(ids []string)
	visit = func(ids []string) {
		for _, id := range ids {
			if i, ok := byName[id]; ok && !use[i] {
				use[i] = true
				visit(defs[i].refs)
			}
		}
	}
	visit(luaIdents(src))
	var b strings.Builder
	for i, d := range defs {
		if use[i] {
			b.WriteString(d.body)
		}
	}
	b.WriteString(src)
	return b.String()
}

// Run executes c on rdb: EVALSHA, then EVAL on NOSCRIPT. A call of one of
// this package's scripts on the Redis client of an open Client goes
// through that Redis client's pipeline, batched with the concurrent calls
// of other goroutines when its writers are busy (see pipeline); ctx still
// bounds the wait for the reply.
func (c Call) Run(ctx context.Context, rdb redis.Scripter) *redis.Cmd {
	if !ownScripts[c.Script] {
		return c.runDirect(ctx, rdb)
	}
	if p := pipelineOf(rdb); p != nil {
		return p.run(ctx, c)
	}
	return c.runDirect(ctx, rdb)
}

// runDirect executes c on rdb by itself: EVALSHA, then EVAL on NOSCRIPT.
func (c Call) runDirect(ctx context.Context, rdb redis.Scripter) *redis.Cmd {
	cmd := c.Script.EvalSha(ctx, rdb, c.Keys, c.Args...)
	if isNoScript(cmd.Err()) {
		cmd = c.Script.Eval(ctx, rdb, c.Keys, c.Args...)
	}
	return cmd
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// runBatch runs calls in pipelines of at most batchSize (go-redis splits a
// pipeline per Cluster node or Ring shard), re-running by EVAL any call
// that met NOSCRIPT. It returns one Cmd per call, in order.
func runBatch(ctx context.Context, rdb redis.UniversalClient, calls []Call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = c.Script.EvalSha(ctx, p, c.Keys, c.Args...)
		}
		return nil
	})
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range again {
				cmds[i] = calls[i].Script.Eval(ctx, p, calls[i].Keys, calls[i].Args...)
			}
			return nil
		})
	}
	return cmds
}

// Reply codes shared by every extend and release script.
const (
	codeOK        = 1
	codeGone      = 0
	codeOther     = -1
	codeWrongType = -2
)
