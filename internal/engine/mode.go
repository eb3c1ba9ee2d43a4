// mode.go owns the queue settings of an acquire attempt: the mode in which
// it treats the key's wait queue, and the Client's hand-off channel, queue
// lease and pickup time that the acquire and release scripts of a
// protocol whose waiters queue in Redis take as arguments.

package engine

import (
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Mode is how one acquire attempt of a protocol whose waiters queue in
// Redis (internal/lualib/queue.lua) treats the key's wait queue. The engine
// picks it per attempt (see Engine.Acquire); the acquire scripts read it as
// their mode argument (see internal/scripts/acquire.lua).
type Mode uint8

const (
	// ModeTry makes one attempt that never queues: a free key is taken
	// only if no live waiter is queued. TryLock, and a waiting call's
	// first attempt before the Client listens for hand-offs.
	ModeTry Mode = iota
	// ModeJoin is a waiter's first attempt: like ModeTry, and if not
	// granted, it joins the queue's tail.
	ModeJoin
	// ModeQueued is a queued waiter's retry: it refreshes its queue lease
	// and takes a free key (or confirms a hand-off) at the head of the
	// queue.
	ModeQueued
	// ModeBarge ignores the queue (Options.Barging): a free key is taken
	// whoever waits.
	ModeBarge
)

// Modes lists every mode.
var Modes = [...]Mode{ModeTry, ModeJoin, ModeQueued, ModeBarge}

// String returns the mode argument the acquire scripts expect.
func (m Mode) String() string {
	switch m {
	case ModeJoin:
		return "q1"
	case ModeQueued:
		return "q"
	case ModeBarge:
		return "barge"
	}
	return "try"
}

// Queued reports whether an attempt in mode m keeps the caller in the
// queue: a queued waiter's attempts, which a release may answer with a
// hand-off.
func (m Mode) Queued() bool { return m == ModeJoin || m == ModeQueued }

// Queue holds a Client's queue settings: what the scripts of a protocol
// whose waiters queue in Redis take besides the keys, the token and the
// TTL. One per Client, shared by its protocols and its attempts.
type Queue struct {
	Channel string        // the Client's hand-off channel (see notify.Notifier.Own)
	Lease   time.Duration // a waiter's queue lease
	Pickup  time.Duration // how long a hand-off waits for its confirmation
	// Exec runs the scripts: the Client's executor, whose pipeline they
	// join (nil in a protocol no Client set up: see On).
	Exec *rexec.Exec
	// Notify is the Client's notifier: on sharded pub/sub it names the
	// hand-off channel of each slot (nil: Channel, plain pub/sub).
	Notify *notify.Notifier
	// Redis is the Client's Redis client (the one a foreign protocol's
	// Acquire gets).
	Redis redis.UniversalClient
}

// Attempt is the queue settings of one acquire attempt: its mode and the
// Client's settings.
type Attempt struct {
	Mode Mode
	*Queue
	// Args, if not nil, holds the attempt's keys and token, and is the
	// attempt's to build its command's arguments in (see ArgBuf).
	Args *ArgBuf
}

// Handoff returns the hand-off channel argument of an attempt on k (see
// notify.Notifier.HandoffChannel).
func (q *Queue) Handoff(k protocol.Keys) string {
	if q.Notify == nil {
		return q.Channel
	}
	return q.Notify.HandoffChannel(keyspace.Slot(k.Lock))
}

// Pub returns k with its wake-up channel as a release script's argument
// (see Wake), for the calls built in internal/scripts/releases.
func (q *Queue) Pub(k protocol.Keys) protocol.Keys {
	k.Wake = q.Wake(k)
	return k
}

// Wake returns the wake-up channel argument of a release of k (see
// notify.Notifier.WakeArg).
func (q *Queue) Wake(k protocol.Keys) string {
	if q.Notify == nil {
		return k.Wake
	}
	return q.Notify.WakeArg(k.Wake)
}

// On returns the executor the calls run on: the Client's, or, where no
// Client set q up, one of their own over Redis.
func (q *Queue) On() *rexec.Exec {
	if q.Exec != nil {
		return q.Exec
	}
	return rexec.New(q.Redis)
}
