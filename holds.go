package dlock

import (
	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/scripts/releases"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
)

// A shared hold is how the reentrant lock and the read side of the
// read-write lock keep one lock key held by several handles at once: the
// key holds a string naming the hold's group (the owner id, or
// keyspace.SharedValue), and a sorted set next to it has one member per handle,
// scored with the server time at which that handle's lease ends (see
// internal/lualib/holds.lua). Each handle is an ordinary lease of the engine:
// the watchdog renews its own member (holds_extend.lua), so a handle whose
// process died expires alone; the key expires with the last live lease;
// releasing the last handle frees the key or hands it to the first queued
// waiter (holds_release.lua), exactly like a token lock's release.

// holdSet is the part of the reentrant and shared protocols they share:
// renewing and releasing one handle. Acquiring differs (the protocols
// embedding it define Acquire).
type holdSet struct {
	q      *engine.Queue // the Client's queue settings
	group  string        // what the lock key holds while the hold lasts
	suffix string        // the hold set's suffix
}

func (h holdSet) set(k protocol.Keys) string { return auxOf(k, h.suffix) }

func (h holdSet) Renew(k protocol.Keys, token string, ttl time.Duration) (protocol.Call, string) {
	return protocol.Call{Script: scripts.HoldsExtend, Keys: []string{k.Lock, h.set(k), k.Fence},
		Args: []any{token, ttl.Milliseconds(), engine.FenceTTL(ttl).Milliseconds(), h.group}}, token
}

func (h holdSet) Release(k protocol.Keys, token string) protocol.Call {
	return h.release(k, token, "0")
}

// Leave takes a waiter out of the queue; a hand-off that reached it too
// late is passed on, a handle it was given is released.
func (h holdSet) Leave(k protocol.Keys, token string) protocol.Call { return h.release(k, token, "1") }

func (h holdSet) release(k protocol.Keys, token, mode string) protocol.Call {
	return releases.Holds(h.q.Pub(k), h.suffix, token, h.group, h.q.Pickup, mode)
}

// JoinsHolds: a grant joins the hold of its group (see engine.Joiner).
func (holdSet) JoinsHolds() {}

// Queued: the waiters of a shared hold queue in Redis.
func (holdSet) Queued() bool { return true }

// ReleaseTellsResend: its release script answers 1 to a second run of a
// release that ran (q_released), so a retry's other replies are losses
// (see engine.ResendTeller).
func (holdSet) ReleaseTellsResend() {}
