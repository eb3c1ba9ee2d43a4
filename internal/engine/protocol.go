// protocol.go owns the one interface through which the engine takes,
// renews and releases every kind of lock (Protocol), and the wrapping of
// a protocol of package protocol in it (Foreign).

package engine

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/protocol"
)

// Protocol is a kind of lock as the engine runs it: the token lock and the
// primitives of package dlock implement it, and a protocol of package
// protocol is wrapped in it by Foreign. A Protocol's value holds no
// per-attempt state: the engine hands each attempt its queue settings.
//
// Optional methods the engine looks for: Direct (renewal and release by
// the protocol itself), RawReleaser, ResendTeller, Leaver, BulkReleaser
// (see calls.go), Joiner (joining.go).
type Protocol interface {
	// Acquire makes one attempt for token on k, in the queue settings a
	// (mode, hand-off channel, queue lease, pickup time). A grant of a
	// multi-key lock carries its keys and their fences (Grant.Multi).
	Acquire(ctx context.Context, a Attempt, k protocol.Keys, token string, ttl time.Duration) (Grant, error)
	// Renew and Release are those of protocol.Protocol.
	Renew(k protocol.Keys, token string, ttl time.Duration) (protocol.Call, string)
	Release(k protocol.Keys, token string) protocol.Call
	// Queued reports whether the protocol's waiters queue in Redis: its
	// attempts honour the mode, a release hands the key to the queue's
	// head and publishes where the Client's waiters listen, and Leave
	// removes a token wherever it is (queued, handed the key, holding it).
	Queued() bool
}

// Slotted is implemented by a protocol whose waiter may queue in several
// Cluster slots (a multi-key lock across slots): it lists them.
type Slotted interface {
	WaiterSlots() []int
}

// Direct is implemented by a protocol that renews and releases by itself
// (protocol.DirectProtocol's methods).
type Direct interface {
	RenewDirect(ctx context.Context, k protocol.Keys, value string, ttl time.Duration) (next string, code int64, err error)
	ReleaseDirect(ctx context.Context, k protocol.Keys, value string) (code int64, err error)
}

// Foreign wraps p, a protocol of package protocol (package legacy's,
// package redlock's, a user's), as a Protocol: its waiters do not queue in
// Redis, and its Acquire gets the Client's Redis client. A
// protocol.DirectProtocol stays one (Direct).
func Foreign(p protocol.Protocol) Protocol {
	if d, ok := p.(protocol.DirectProtocol); ok {
		return foreignDirect{d}
	}
	return foreign{p}
}

type foreign struct{ protocol.Protocol }

func (f foreign) Acquire(ctx context.Context, a Attempt, k protocol.Keys, token string, ttl time.Duration) (Grant, error) {
	g, err := f.Protocol.Acquire(ctx, a.Redis, k, token, ttl)
	return Grant{Grant: g}, err
}

func (foreign) Queued() bool { return false }

type foreignDirect struct{ protocol.DirectProtocol }

func (f foreignDirect) Acquire(ctx context.Context, a Attempt, k protocol.Keys, token string, ttl time.Duration) (Grant, error) {
	g, err := f.DirectProtocol.Acquire(ctx, a.Redis, k, token, ttl)
	return Grant{Grant: g}, err
}

func (foreignDirect) Queued() bool { return false }
