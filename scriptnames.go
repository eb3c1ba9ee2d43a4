package dlock

import (
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/redis/go-redis/v9"
)

// Script names for the command-level fault layer of the tests
// (internal/faultcmd matches EVALSHA calls by these names): each script's
// file name without ".lua".
func init() {
	for name, s := range map[string]*redis.Script{
		"acquire": acquireScript, "extend": extendScript, "release": releaseScript,
		"extend_many": extendManyScript, "release_many": releaseManyScript,
		"shared_acquire":    sharedAcquireScript,
		"semaphore_acquire": semaphoreAcquireScript, "semaphore_extend": semaphoreExtendScript,
		"semaphore_release": semaphoreReleaseScript, "semaphore_limit": semaphoreLimitScript,
		"reentrant_acquire": reentrantAcquireScript,
		"multi_acquire":     multiAcquireScript, "multi_release": multiReleaseScript,
		"holds_extend": holdsExtendScript, "holds_release": holdsReleaseScript,
		"counter_add": counterAddScript, "counter_set": counterSetScript,
		"counter_segments": counterSegmentsScript,
	} {
		probe.NameScript(name, s.Hash())
		ownScripts[s] = true
	}
	// The election's scripts are named too; they run by themselves.
	probe.NameScript("elect_publish", electPublishScript.Hash())
	probe.NameScript("elect_read", electReadScript.Hash())
}

// ownScripts holds every script of this package: the calls
// runScript sends through a Client's pipeline. Other packages' scripts
// (package redlock's, package legacy's, a user's Protocol's) run by
// themselves, as their code expects.
var ownScripts = map[*redis.Script]bool{}
