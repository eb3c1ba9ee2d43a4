package dlock

import "github.com/dlock-go/dlock/protocol"

// WithProtocol makes the call use p instead of the token lock: another
// lock format on the same engine (package legacy's, package redlock's, or
// your own; see package protocol). It applies to exclusive locks only
// (Client.Lock, TryLock, Do): RWLock readers, Reentrant and Semaphore
// refuse it (ErrInvalidOpts).
func WithProtocol(p protocol.Protocol) LockOption {
	return func(c *lockConfig) { c.proto, c.kinds = p, c.kinds|kindProtocol }
}
