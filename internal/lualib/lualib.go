// Package lualib holds the Lua functions that the Redis scripts of dlock,
// dlock/legacy and dlock/redlock share, builds those scripts, and tells a
// NOSCRIPT reply (IsNoScript) and its FCALL counterpart (IsNoFunction). It imports no package of the module, so
// every package can use it, the lowest layer (internal/scripts) included.
//
// Each library file (publish.lua, fence.lua, owner.lua, queue.lua,
// holds.lua, semaphore.lua, counter.lua) defines top-level local functions
// and constants only, and runs no command of its own. Build puts in front
// of a script only the library definitions it uses, directly or through
// another library function, so each script is still sent as one
// self-contained body, and Redis does not build closures it never calls on
// every run.
package lualib

import (
	_ "embed"
	"regexp"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The library files, in the order their definitions are emitted: a file
// may use the definitions of the files before it.
var (
	//go:embed publish.lua
	publishSrc string
	//go:embed fence.lua
	fenceSrc string
	//go:embed owner.lua
	ownerSrc string
	//go:embed queue.lua
	queueSrc string
	//go:embed holds.lua
	holdsSrc string
	//go:embed semaphore.lua
	semaphoreSrc string
	//go:embed counter.lua
	counterSrc string
)

// libFiles returns the library files by name.
func libFiles() map[string]string {
	return map[string]string{
		"publish.lua": publishSrc, "fence.lua": fenceSrc, "owner.lua": ownerSrc, "queue.lua": queueSrc,
		"holds.lua": holdsSrc, "semaphore.lua": semaphoreSrc, "counter.lua": counterSrc,
	}
}

var defs = sync.OnceValue(func() []def {
	return parse(publishSrc, fenceSrc, ownerSrc, queueSrc, holdsSrc, semaphoreSrc, counterSrc)
})

// Script returns the script src (the body of an embedded .lua file, header
// included) with the library definitions it uses in front (see Build).
func Script(src string) *redis.Script {
	return redis.NewScript(Build(src))
}

// IsNoScript reports whether err is Redis's NOSCRIPT reply to EVALSHA: the
// server does not have the script (after a restart, a failover or SCRIPT
// FLUSH), and the caller sends it by EVAL instead, which loads it again.
// It is the one NOSCRIPT check of the module.
func IsNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// IsNoFunction reports whether err is Redis's reply to an FCALL of a
// function the server does not have (its library never loaded there, or
// gone after a restart or FUNCTION FLUSH): the function did not run.
func IsNoFunction(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "ERR Function not found")
}

// Build returns src preceded by the library definitions that src uses,
// directly or through other definitions, in the library's order (each
// definition comes after those it uses, as Lua's local scoping needs).
// Comment lines of the library are dropped; src is kept whole. The result
// depends only on src and the library, so a script's SHA1 is the same in
// every process of one version.
func Build(src string) string {
	return lean(src, defs())
}

// Definitions returns every library definition, in the library's order,
// comment lines dropped: the top of a Redis Function library whose
// functions use any of them (see internal/scripts).
func Definitions() string {
	var b strings.Builder
	for _, d := range defs() {
		b.WriteString(d.body)
	}
	return b.String()
}

// def is one top-level definition of a library file: a local function,
// or a line of local constants.
type def struct {
	names []string // what it defines
	body  string   // its code, comment lines dropped
	refs  []string // the identifiers its code mentions
}

var (
	funcRE  = regexp.MustCompile(`^local\s+function\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(`)
	constRE = regexp.MustCompile(`^local\s+([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)\s*=`)
	identRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// parse splits library files into their top-level definitions, in order.
// A definition starts at a line "local function name(" or
// "local A, B = ..." in the first column and runs to the next one; comment
// lines and blank lines are dropped.
func parse(files ...string) []def {
	var ds []def
	for _, f := range files {
		cur := -1
		for _, line := range strings.Split(f, "\n") {
			var names []string
			if m := funcRE.FindStringSubmatch(line); m != nil {
				names = []string{m[1]}
			} else if m := constRE.FindStringSubmatch(line); m != nil {
				for _, n := range strings.Split(m[1], ",") {
					names = append(names, strings.TrimSpace(n))
				}
			}
			if names != nil {
				ds = append(ds, def{names: names})
				cur = len(ds) - 1
			}
			t := strings.TrimSpace(line)
			if cur < 0 || t == "" || strings.HasPrefix(t, "--") {
				continue
			}
			ds[cur].body += line + "\n"
		}
	}
	for i := range ds {
		ds[i].refs = idents(ds[i].body)
	}
	return ds
}

// idents returns the identifiers in code, its comment lines skipped.
func idents(code string) []string {
	var ids []string
	for _, line := range strings.Split(code, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		ids = append(ids, identRE.FindAllString(line, -1)...)
	}
	return ids
}

// lean returns src preceded by the definitions of ds that src uses,
// directly or through other definitions, in the order of ds.
func lean(src string, ds []def) string {
	byName := map[string]int{}
	for i, d := range ds {
		for _, n := range d.names {
			byName[n] = i
		}
	}
	use := make([]bool, len(ds))
	var visit func(ids []string)
	visit = func(ids []string) {
		for _, id := range ids {
			if i, ok := byName[id]; ok && !use[i] {
				use[i] = true
				visit(ds[i].refs)
			}
		}
	}
	visit(idents(src))
	var b strings.Builder
	for i, d := range ds {
		if use[i] {
			b.WriteString(d.body)
		}
	}
	b.WriteString(src)
	return b.String()
}
