package dlock

import (
	"reflect"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// acquireMode is how one acquire attempt of a protocol whose waiters queue
// in Redis (internal/lualib/queue.lua) treats the key's wait queue. The engine
// picks it per attempt (see Client.obtain); the acquire scripts read it as
// their mode argument (see internal/scripts/acquire.lua).
type acquireMode uint8

const (
	// modeTry makes one attempt that never queues: a free key is taken
	// only if no live waiter is queued. TryLock, and a waiting call's
	// first attempt before the Client listens for hand-offs.
	modeTry acquireMode = iota
	// modeJoin is a waiter's first attempt: like modeTry, and if not
	// granted, it joins the queue's tail.
	modeJoin
	// modeQueued is a queued waiter's retry: it refreshes its queue lease
	// and takes a free key (or confirms a hand-off) at the head of the
	// queue.
	modeQueued
	// modeBarge ignores the queue (Options.Barging): a free key is taken
	// whoever waits.
	modeBarge
)

// String returns the mode argument the acquire scripts expect.
func (m acquireMode) String() string {
	switch m {
	case modeJoin:
		return "q1"
	case modeQueued:
		return "q"
	case modeBarge:
		return "barge"
	}
	return "try"
}

// queued reports whether an attempt in mode m keeps the caller in the
// queue: a queued waiter's attempts, which a release may answer with a
// hand-off.
func (m acquireMode) queued() bool { return m == modeJoin || m == modeQueued }

// queueMode configures the acquire attempts of a protocol whose waiters
// queue in Redis: the token lock and the primitives of this package
// (shared, reentrant, semaphore, multi-key). Each such protocol embeds it,
// and the engine sets it per attempt with withMode.
type queueMode struct {
	mode    acquireMode
	channel string        // the waiter's hand-off channel (modeJoin, modeQueued)
	lease   time.Duration // the waiter's queue lease (modeJoin, modeQueued)
	pickup  time.Duration // how long a hand-off waits for its confirmation
	// exec runs the attempt's script: the Client's executor, whose
	// pipeline it joins (nil in a protocol no Client set up: see on).
	exec *rexec.Exec
	// notify is the Client's notifier: on sharded pub/sub it names the
	// hand-off channel of each slot (nil: channel, plain pub/sub).
	notify *notify.Notifier
}

// handoff returns the hand-off channel argument of an attempt on k (see
// notify.HandoffChannel).
func (q queueMode) handoff(k protocol.Keys) string {
	if q.notify == nil {
		return q.channel
	}
	return q.notify.HandoffChannel(keyspace.Slot(k.Lock))
}

// pub returns k with its wake-up channel as a release script's argument
// (see wake), for the calls built in internal/scripts/releases.
func (q queueMode) pub(k protocol.Keys) protocol.Keys {
	k.Wake = q.wake(k)
	return k
}

// wake returns the wake-up channel argument of a release of k (see
// notify.WakeArg).
func (q queueMode) wake(k protocol.Keys) string {
	if q.notify == nil {
		return k.Wake
	}
	return q.notify.WakeArg(k.Wake)
}

// on returns the executor q's calls run on: the Client's, or for a
// protocol no Client set up, one of their own over rdb.
func (q queueMode) on(rdb redis.UniversalClient) *rexec.Exec {
	if q.exec != nil {
		return q.exec
	}
	return rexec.New(rdb)
}

// queueSettings returns the settings a protocol embedding q runs with; it
// also marks the protocols that embed a queueMode (see queued).
func (q queueMode) queueSettings() queueMode { return q }

// setQueueSettings replaces the settings (see withMode).
func (q *queueMode) setQueueSettings(m queueMode) { *q = m }

// queued is implemented by the protocols whose waiters queue in Redis: the
// ones that embed a queueMode. A queued protocol uses the same token as its
// queue entry, its held value and its hand-off message, and withdraw (its
// Leave call, or ReleaseDirect) removes that token from wherever it is:
// queued, handed a lock, or holding one.
type queued interface {
	protocol.Protocol
	queueSettings() queueMode
}

// withMode returns a copy of p whose embedded queueMode is m: the protocol
// of one acquire attempt. p itself is not changed, so the protocol of an
// earlier attempt (held by a lease, or by a withdrawal running in the
// background) keeps its settings. A method promoted from the embedded
// queueMode cannot return the protocol that embeds it, so the copy is
// made here, once, for every queued protocol.
func withMode(p queued, m queueMode) protocol.Protocol {
	v := reflect.New(reflect.TypeOf(p))
	v.Elem().Set(reflect.ValueOf(p))
	v.Interface().(interface{ setQueueSettings(queueMode) }).setQueueSettings(m)
	return v.Elem().Interface().(protocol.Protocol)
}

// queueMode returns the queue settings of this Client for mode.
func (c *Client) queueMode(mode acquireMode) queueMode {
	return queueMode{mode: mode, channel: c.notify.Own(), lease: c.opts.WaiterLease, pickup: c.opts.PickupTimeout, exec: c.exec, notify: c.notify}
}

// modal returns proto set up for acquire mode m, and whether its waiters
// queue in Redis. The token lock gets the Client's replica settings.
func (c *Client) modal(proto protocol.Protocol, m acquireMode) (protocol.Protocol, bool) {
	switch p := proto.(type) {
	case tokenLock:
		return c.tokenLock(m), true
	case queued:
		return withMode(p, c.queueMode(m)), true
	}
	return proto, false
}
