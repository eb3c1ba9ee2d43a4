// Package scripts owns the Lua scripts that package dlock runs: every .lua
// file of this directory, each with a header stating its KEYS, ARGV and
// replies, and the one registry of them.
//
// A script's name is its file name without ".lua". What Redis runs, its
// body, is the file whole with the library definitions it uses in front
// (internal/lualib, which the scripts of packages redlock and legacy share
// too), so each script is sent as one self-contained body whose SHA1 is
// the same in every process of one version. Where the server has Redis
// Functions, the scripts run as the functions of one library generated
// from the same files (Lib, library.go).
//
// The registry feeds everything that needs the list of these scripts: the
// Client's pipeline runs the calls of these scripts only (Owns), and the
// command-level fault layer of the tests matches EVALSHA and FCALL calls by script
// name (each script is named with probe.NameScript when this package is
// initialized, by its SHA1 and by its function's name). Go code refers to a script by its variable below, named
// after its file; a test checks that every file has one.
//
// This is the lowest layer of dlock's engine: it imports no other layer
// (see internal/layers_test.go), only the helper packages lualib and probe.
package scripts

import (
	"embed"
	"io/fs"
	"slices"
	"strings"

	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

// The scripts, one per file (the file is named in snake case: extend_many
// for ExtendMany).
var (
	Acquire          = get("acquire")
	CounterAdd       = get("counter_add")
	CounterSegments  = get("counter_segments")
	CounterSet       = get("counter_set")
	ElectPublish     = get("elect_publish")
	ElectRead        = get("elect_read")
	Extend           = get("extend")
	ExtendMany       = get("extend_many")
	HoldsExtend      = get("holds_extend")
	HoldsRelease     = get("holds_release")
	MultiAcquire     = get("multi_acquire")
	MultiRelease     = get("multi_release")
	ReentrantAcquire = get("reentrant_acquire")
	Release          = get("release")
	ReleaseMany      = get("release_many")
	SemaphoreAcquire = get("semaphore_acquire")
	SemaphoreExtend  = get("semaphore_extend")
	SemaphoreLimit   = get("semaphore_limit")
	SemaphoreRelease = get("semaphore_release")
	SharedAcquire    = get("shared_acquire")
)

// Entry is one script of the registry.
type Entry struct {
	Name   string        // the file name without ".lua"
	Src    string        // the file as written
	Body   string        // what Redis runs: Src with the library definitions it uses in front
	Script *redis.Script // Body's EVALSHA and EVAL
	Func   string        // its function in the library (see library.go)

	funcArg, shaArg any // Func and Body's SHA1, boxed once
}

// registry holds every script by name and by *redis.Script; it is built
// once, at initialization, and only read afterwards.
type registry struct {
	byName   map[string]*Entry
	byScript map[*redis.Script]*Entry
	byHash   map[string]*Entry // by Body's SHA1
	byFunc   map[string]*Entry // by Func
	lib      Library
	typed    map[string]bool // the names a variable above refers to (see get)
}

var reg = load()

// load reads every .lua file of the package into the registry and names
// each script for the fault layer.
func load() *registry {
	r := &registry{byName: map[string]*Entry{}, byScript: map[*redis.Script]*Entry{}, byHash: map[string]*Entry{},
		byFunc: map[string]*Entry{}, typed: map[string]bool{}}
	paths, err := fs.Glob(files, "*.lua")
	if err != nil {
		panic("scripts: " + err.Error()) // only a malformed pattern fails
	}
	var es []*Entry
	for _, p := range paths {
		b, err := files.ReadFile(p)
		if err != nil {
			panic("scripts: " + err.Error()) // an embedded file always reads
		}
		e := &Entry{Name: strings.TrimSuffix(p, ".lua"), Src: string(b)}
		e.Body = lualib.Build(e.Src)
		e.Script = redis.NewScript(e.Body)
		r.byName[e.Name] = e
		r.byScript[e.Script] = e
		r.byHash[e.Script.Hash()] = e
		es = append(es, e)
	}
	r.lib = library(r, es) // paths are sorted: es is by name
	for _, e := range es {
		probe.NameScript(e.Name, e.Script.Hash())
		probe.NameScript(e.Name, e.Func)
	}
	return r
}

// get returns the script of the file name.lua; a name without a file
// stops the program at initialization (TestEveryFileTyped runs it).
func get(name string) *redis.Script {
	e, ok := reg.byName[name]
	if !ok {
		panic("scripts: no file " + name + ".lua")
	}
	reg.typed[name] = true
	return e.Script
}

// All returns every script, by name.
func All() []Entry {
	es := make([]Entry, 0, len(reg.byName))
	for _, e := range reg.byName {
		es = append(es, *e)
	}
	slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return es
}

// Of returns the entry of s, and whether s is one of these scripts.
func Of(s *redis.Script) (Entry, bool) {
	if e, ok := reg.byScript[s]; ok {
		return *e, true
	}
	return Entry{}, false
}

// Owns reports whether s is one of these scripts.
func Owns(s *redis.Script) bool {
	_, ok := reg.byScript[s]
	return ok
}

// Body returns what Redis runs for s, one of these scripts ("" for
// another script).
func Body(s *redis.Script) string {
	if e, ok := reg.byScript[s]; ok {
		return e.Body
	}
	return ""
}
