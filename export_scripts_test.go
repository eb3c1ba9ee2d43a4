package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/protocol"
)

// ScriptDriver runs single acquire and release scripts of one lock with a
// chosen token and queue mode, so tests can set up the exact interleavings
// (a hand-off whose confirm comes after its pickup) that the engine makes
// only under pauses.
type ScriptDriver struct {
	c     *Client
	base  engine.Protocol
	keys  protocol.Keys
	Chan  string // the channel hand-offs to this driver's waiters go to
	Lease time.Duration
	KeyB  string // free for tests: a key they track
}

// Kind is the kind of lock of a typed handle's call.
type Kind = kind

// The kinds NewScriptDriver takes besides the exclusive lock: what
// RWLock.RLock, Reentrant and Semaphore (one permit) pass to the engine.
var (
	ReadersKind   = func() Kind { return readers{} }
	ReentrantKind = func(owner string) Kind { return owned{owner} }
	SemaphoreKind = func(limit int) Kind { return permits{limit: limit, n: 1} }
)

// NewScriptDriver returns a driver for keys (one key, or a same-slot
// multi-key lock) of kind k (one of the kinds above, or none).
func NewScriptDriver(ctx context.Context, c *Client, keys []string, k ...Kind) (*ScriptDriver, error) {
	var p engine.Protocol = c.token
	var err error
	if len(keys) > 1 {
		p = c.multiGroups(keys)[0]
	} else if len(k) > 0 {
		if p, err = k[0].build(ctx, c); err != nil {
			return nil, err
		}
	}
	return &ScriptDriver{c: c, base: p, keys: c.keysFor(c.multiGroups(keys)[0].Keys[0]), Chan: "test:handoff:" + engine.NewToken(), Lease: c.opts.WaiterLease}, nil
}

// attempt returns the queue settings of an attempt in mode: the Client's,
// with the driver's hand-off channel and queue lease.
func (d *ScriptDriver) attempt(mode string) engine.Attempt {
	q := *d.c.queue
	q.Channel, q.Lease = d.Chan, d.Lease
	return engine.Attempt{Mode: modeNamed(mode), Queue: &q}
}

// modeNamed returns the acquire mode whose script argument is name.
func modeNamed(name string) engine.Mode {
	for _, m := range engine.Modes {
		if m.String() == name {
			return m
		}
	}
	panic("dlock: no acquire mode " + name)
}

// Acquire makes one attempt in mode (try, q1, q, barge) with token.
func (d *ScriptDriver) Acquire(ctx context.Context, token, mode string, ttl time.Duration) (bool, uint64, error) {
	g, err := d.base.Acquire(ctx, d.attempt(mode), d.keys, token, ttl)
	return g.Acquired, g.Fence, err
}

// Release releases token's hold; Leave withdraws token (waiting or held).
func (d *ScriptDriver) Release(ctx context.Context, token string) (int64, error) {
	return engine.ReleaseOnce(ctx, d.c.exec, d.base, d.keys, token)
}

// Leave withdraws token, queued, handed or holding.
func (d *ScriptDriver) Leave(ctx context.Context, token string) error {
	return engine.Withdraw(ctx, d.c.exec, d.base, d.keys, token)
}

// Keys are the names of the driver's (first) lock.
func (d *ScriptDriver) Keys() protocol.Keys { return d.keys }

// NewTestToken returns a fresh token.
func NewTestToken() string { return engine.NewToken() }

// Ambiguous exposes the classification of errors that leave unknown
// whether a command ran.
func Ambiguous(err error) bool { return engine.Ambiguous(err) }
