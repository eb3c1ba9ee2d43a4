package scripts

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"

	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/redis/go-redis/v9"
)

// The scripts as one Redis Function library, for servers that have
// Functions (Redis 7.0+, Valkey): loaded once per master by FUNCTION LOAD,
// each script then runs by FCALL of its function, without Redis building
// the library definitions again on every call as it does for a script.
//
// The library is generated from the same files as the scripts: every
// library definition of internal/lualib once at the top, then each script
// file whole as the body of a function registered under its name, with
// KEYS and ARGV as its parameters. The library's name carries its
// version, a hash of the definitions and of every script's name and file
// (which the text depends on only): "dlock_<16 hex digits>", and each
// function's name is the library's, "_", and the script's name
// ("dlock_0123456789abcdef_acquire"). Function names are global on a
// server, so two dlock versions on one Redis load two libraries and never
// call each other's code.
//
// The functions declare no flags: like a script they may write, so a
// server refuses them before they run where it refuses writes (maxmemory
// reached, too few replicas, a failed save, a replica); the caller then
// runs the script by EVALSHA instead, whose writes Redis checks one by one
// (see internal/rexec).

// Library is the function library of every script: its name and the code
// FUNCTION LOAD takes.
type Library struct {
	Name string
	Code string
}

// Lib returns the function library of every script.
func Lib() Library { return reg.lib }

// FuncArg returns the name of s's function, boxed once for a command's
// arguments, and whether s is one of these scripts.
func FuncArg(s *redis.Script) (any, bool) {
	if e, ok := reg.byScript[s]; ok {
		return e.funcArg, true
	}
	return nil, false
}

// ByHash returns the entry of the script whose SHA1 (hex, as an EVALSHA
// argument: a string) is sha, and whether it is one of these scripts.
func ByHash(sha any) (*Entry, bool) {
	s, ok := sha.(string)
	if !ok {
		return nil, false
	}
	e, ok := reg.byHash[s]
	return e, ok
}

// ByFunc returns the entry of the script whose function's name (a string)
// is fn, and whether it is one of these scripts.
func ByFunc(fn any) (*Entry, bool) {
	s, ok := fn.(string)
	if !ok {
		return nil, false
	}
	e, ok := reg.byFunc[s]
	return e, ok
}

// FuncArg returns the name of e's function boxed once, and ShaArg its
// SHA1: the second argument of its FCALL and of its EVALSHA.
func (e *Entry) FuncArg() any { return e.funcArg }

// ShaArg returns the SHA1 of e's body boxed once (see FuncArg).
func (e *Entry) ShaArg() any { return e.shaArg }

// library builds the function library of es, sorted by name, sets each
// entry's function name, and records it in r.
func library(r *registry, es []*Entry) Library {
	defs := lualib.Definitions()
	h := sha1.New()
	h.Write([]byte(defs))
	for _, e := range es {
		h.Write([]byte("\x00" + e.Name + "\x00" + e.Src))
	}
	name := "dlock_" + hex.EncodeToString(h.Sum(nil))[:16]
	var b strings.Builder
	b.WriteString("#!lua name=" + name + "\n")
	b.WriteString(defs)
	for _, e := range es {
		e.Func = name + "_" + e.Name
		e.funcArg, e.shaArg = any(e.Func), any(e.Script.Hash())
		r.byFunc[e.Func] = e
		b.WriteString("redis.register_function('" + e.Func + "', function(KEYS, ARGV)\n")
		b.WriteString(e.Src)
		if !strings.HasSuffix(e.Src, "\n") {
			b.WriteString("\n")
		}
		b.WriteString("end)\n")
	}
	return Library{Name: name, Code: b.String()}
}
