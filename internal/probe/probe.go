// Package probe holds the engine's test points: named places in dlock's
// protocol code where a test can stand in for a scheduler or GC pause (or
// observe that the step was reached), and the names of dlock's scripts so
// a command-level fault layer (internal/faultcmd) can match EVALSHA calls
// by script name.
//
// A point costs one atomic load and a nil check when no test has set a
// function: production code never sets one.
//
// The points (Point's name argument), in protocol order:
//
//	AfterGrant       an acquire or confirm reply said "granted" and the
//	                 engine has not yet started the lease (nor judged the
//	                 reply late): a pause here is a holder stalled between
//	                 Redis granting the key and the lease's deadline timer
//	                 and watchdog taking over.
//	BeforeWithdraw   the engine is about to send a withdraw (the clean-up
//	                 of an ambiguous or late acquire, or a waiter leaving
//	                 the queue).
//	HandoffReceived  the notifier received a hand-off message for one of
//	                 its queued waiters, before waking it (runs on the
//	                 notifier's goroutine: a pause stalls every hand-off of
//	                 the Client).
//	BeforeConfirm    a queued waiter was woken by a hand-off and is about
//	                 to send its confirming acquire.
//	WatchdogBeforeBatch  the watchdog is about to build a renewal batch
//	                 (key is "").
//	WatchdogAfterBatch   the watchdog received a batch's replies and has
//	                 not applied them yet (key is "").
//	BeforeRelease    Unlock is about to send the release.
//
// key is the lock key the step concerns ("" for a batch).
package probe

import (
	"crypto/sha1"
	"encoding/hex"
	"sync"
	"sync/atomic"
)

// Names of the points; see the package doc.
const (
	AfterGrant          = "after-grant"
	BeforeWithdraw      = "before-withdraw"
	HandoffReceived     = "handoff-received"
	BeforeConfirm       = "before-confirm"
	WatchdogBeforeBatch = "watchdog-before-batch"
	WatchdogAfterBatch  = "watchdog-after-batch"
	BeforeRelease       = "before-release"
)

// Points lists every point name.
var Points = []string{AfterGrant, BeforeWithdraw, HandoffReceived, BeforeConfirm,
	WatchdogBeforeBatch, WatchdogAfterBatch, BeforeRelease}

var fn atomic.Pointer[func(name, key string)]

// Point runs the function set by Set, if any, with the point's name and
// key. It returns when that function returns (a pause is a function that
// sleeps or blocks).
func Point(name, key string) {
	if f := fn.Load(); f != nil {
		(*f)(name, key)
	}
}

// Set makes Point call f (nil: nothing) and returns a function restoring
// the previous one. f is called concurrently from the engine's goroutines.
func Set(f func(name, key string)) (restore func()) {
	var p *func(name, key string)
	if f != nil {
		p = &f
	}
	old := fn.Swap(p)
	return func() { fn.Store(old) }
}

var (
	scriptMu    sync.RWMutex
	scriptNames = map[string]string{} // sha1 hex -> name
)

// NameScript records that the script whose SHA1 (hex, as
// redis.Script.Hash returns it) is sha is called name.
func NameScript(name, sha string) {
	scriptMu.Lock()
	scriptNames[lower(sha)] = name
	scriptMu.Unlock()
}

// ScriptName returns the name recorded for the script with SHA1 sha (hex,
// either case), or "".
func ScriptName(sha string) string {
	scriptMu.RLock()
	defer scriptMu.RUnlock()
	if n, ok := scriptNames[sha]; ok {
		return n
	}
	return scriptNames[lower(sha)]
}

// ScriptNameOfSource returns the name recorded for the script source src.
func ScriptNameOfSource(src string) string {
	sum := sha1.Sum([]byte(src))
	return ScriptName(hex.EncodeToString(sum[:]))
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'F' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
