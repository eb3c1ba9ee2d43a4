package dlock

import (
	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/protocol"
)

// WithProtocol makes the call use p instead of the token lock: another
// lock format on the same engine (package legacy's, package redlock's, or
// your own; see package protocol). It applies to exclusive locks only
// (Client.Lock, TryLock, Do): RWLock readers, Reentrant and Semaphore
// refuse it (ErrInvalidOpts).
func WithProtocol(p protocol.Protocol) LockOption {
	var ep engine.Protocol // nil: refused by lockConfig
	if !isNil(p) {
		ep = engine.Foreign(p)
	}
	return func(c *lockConfig) { c.proto, c.withProto = ep, true }
}

// The optional methods the engine looks for (see internal/engine's
// calls.go): a primitive that loses one by a typo no longer compiles.
var (
	_ engine.Protocol     = tokenLock{}
	_ engine.Protocol     = ackedTokenLock{}
	_ engine.Protocol     = sharedLock{}
	_ engine.Protocol     = reentrantLock{}
	_ engine.Protocol     = semaphore{}
	_ engine.Direct       = ackedTokenLock{}
	_ engine.RawReleaser  = tokenLock{}
	_ engine.BulkRenewer  = tokenLock{}
	_ engine.BulkReleaser = tokenLock{}
	_ engine.ResendTeller = tokenLock{}
	_ engine.ResendTeller = holdSet{}
	_ engine.ResendTeller = semaphore{}
	_ engine.Leaver       = tokenLock{}
	_ engine.Leaver       = holdSet{}
	_ engine.Leaver       = semaphore{}
	_ engine.DirectLeaver = ackedTokenLock{}
)
