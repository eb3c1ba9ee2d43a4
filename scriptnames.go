package dlock

import "github.com/dlock-go/dlock/internal/probe"

// Script names for the command-level fault layer of the tests
// (internal/faultcmd matches EVALSHA calls by these names): each script's
// file name without ".lua".
func init() {
	for name, s := range map[string]interface{ Hash() string }{
		"acquire": acquireScript, "extend": extendScript, "release": releaseScript,
		"extend_many": extendManyScript, "release_many": releaseManyScript,
		"shared_acquire": sharedAcquireScript, "guard": guardScript,
		"semaphore_acquire": semaphoreAcquireScript, "semaphore_extend": semaphoreExtendScript,
		"semaphore_release": semaphoreReleaseScript, "semaphore_limit": semaphoreLimitScript,
		"reentrant_acquire": reentrantAcquireScript,
		"multi_acquire":     multiAcquireScript, "multi_release": multiReleaseScript,
		"holds_extend": holdsExtendScript, "holds_release": holdsReleaseScript,
		"counter_add": counterAddScript,
	} {
		probe.NameScript(name, s.Hash())
	}
}
