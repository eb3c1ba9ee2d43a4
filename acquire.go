// acquire.go owns how a call of the public API becomes an acquiring call
// of the engine: the key and options checked, the protocol the call's kind
// chose, and the outcome reported (internal/engine runs the attempts, the
// wait and the withdrawals).

package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/protocol"
)

// kind is the kind of lock a typed handle takes (RWLock's readers and
// writer, Reentrant, Semaphore): it checks the handle's arguments and
// builds the protocol of one call.
type kind interface {
	build(ctx context.Context, c *Client) (engine.Protocol, error)
}

// acquire takes key for a call of Client.Lock or TryLock (k nil) or of a
// typed handle of kind k.
func (c *Client) acquire(ctx context.Context, key string, wait bool, opts []LockOption, k kind) (*Lock, error) {
	start := time.Now()
	if ctx == nil {
		return nil, ErrNilContext
	}
	if err := validKey(c.opts.Prefix, key); err != nil {
		return nil, err
	}
	cfg, err := c.lockConfig(opts)
	if err != nil {
		return nil, err
	}
	proto, err := c.protocolFor(ctx, cfg, k)
	if err != nil {
		return nil, err
	}
	if c.closed() {
		return nil, ErrClosed
	}
	return c.obtain(ctx, start, c.keysFor(key), proto, cfg, wait)
}

// protocolFor returns the protocol of a call with cfg by a handle of kind
// k (nil: Client.Lock's): the Client's token lock, WithProtocol's, or the
// kind's.
func (c *Client) protocolFor(ctx context.Context, cfg lockConfig, k kind) (engine.Protocol, error) {
	switch {
	case k == nil && cfg.proto == nil:
		return c.token, nil
	case k == nil:
		return cfg.proto, nil
	case cfg.withProto:
		return nil, fmt.Errorf("%w: WithProtocol applies to exclusive locks only (Client.Lock, TryLock, Do), not to RWLock, Reentrant or Semaphore", ErrInvalidOpts)
	}
	return k.build(ctx, c)
}

// obtain acquires the lock keys names with proto (see engine.Engine.Acquire)
// and reports the call's outcome.
func (c *Client) obtain(ctx context.Context, start time.Time, keys protocol.Keys, proto engine.Protocol, cfg lockConfig, wait bool) (*Lock, error) {
	res, err := c.eng.Acquire(ctx, engine.Request{Keys: keys, Proto: proto, TTL: cfg.ttl, Renew: cfg.renew, Wait: wait, NewLease: newHeldLock})
	var fence uint64
	if err == nil {
		fence = res.Lease.Fence()
	}
	c.acquired(ctx, keys.Lock, start, res.Attempts, wait, res.Waited, fence, err)
	if err != nil {
		return nil, err
	}
	return res.Handle.(*Lock), nil
}

// newHeldLock makes a lease and its Lock together (see heldLock).
func newHeldLock() (*engine.Lease, any) {
	h := new(heldLock)
	h.lock.l = &h.lease
	return &h.lease, &h.lock
}
