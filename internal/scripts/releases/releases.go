// Package releases lays out the release calls of dlock's own kinds of
// lock (the token lock, the shared holds of read and reentrant locks, the
// semaphore): the keys and arguments of each release script, written
// once for the primitives of package dlock and the operator's releases of
// package admin (a part of the scripts layer: the scripts' inputs). It
// makes no Redis call.
package releases

import (
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
)

// The modes of a release call (the scripts' mode argument).
const (
	Release = "0"     // a holder's release
	Leave   = "1"     // a waiter's withdrawal: a hand-off that reached it too late is passed on
	Force   = "force" // an operator's release of whatever the key holds
)

// Token is the release of value on the token lock k (release.lua);
// pickup is how long a hand-off to the next waiter waits for its
// confirmation.
func Token(k protocol.Keys, value string, pickup time.Duration, mode string) protocol.Call {
	return protocol.Call{Script: scripts.Release, Keys: []string{k.Lock, k.Queue, k.Waiters, k.Tombs},
		Args: []any{value, k.Wake, pickup.Milliseconds(), mode}}
}

// Holds is the release of the handle token of the shared hold of group
// (the owner id, or keyspace.SharedValue) whose hold set has the auxiliary
// suffix suffix (holds_release.lua).
func Holds(k protocol.Keys, suffix, token, group string, pickup time.Duration, mode string) protocol.Call {
	return protocol.Call{Script: scripts.HoldsRelease, Keys: []string{k.Lock, k.Queue, keyspace.Aux(k, suffix), k.Waiters, k.Tombs},
		Args: []any{token, k.Wake, pickup.Milliseconds(), mode, group}}
}

// Semaphore is the release of the permits of token on the semaphore k
// (semaphore_release.lua); limit is the caller's limit (0: none known,
// see the script).
func Semaphore(k protocol.Keys, token string, pickup time.Duration, mode string, limit int) protocol.Call {
	return protocol.Call{Script: scripts.SemaphoreRelease,
		Keys: []string{k.Lock, keyspace.Aux(k, keyspace.PermitsSuffix), keyspace.Aux(k, keyspace.LimitSuffix), k.Queue, k.Waiters, k.Tombs},
		Args: []any{token, k.Wake, pickup.Milliseconds(), mode, limit}}
}
