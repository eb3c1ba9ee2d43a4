// acquire.go owns how a call of the public API becomes an acquiring call
// of the engine: the key and options checked, the protocol the call's kind
// chose, and the outcome reported (internal/engine runs the attempts, the
// wait and the withdrawals).

package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/protocol"
)

func (c *Client) acquire(ctx context.Context, key string, wait bool, opts []LockOption) (*Lock, error) {
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
	proto, err := c.primitive(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if c.closed() {
		return nil, ErrClosed
	}
	return c.obtain(ctx, start, c.keysFor(key), proto, cfg, wait)
}

// primitive returns the protocol the call's options chose.
func (c *Client) primitive(ctx context.Context, cfg lockConfig) (engine.Protocol, error) {
	switch cfg.kinds {
	case kindShared:
		return sharedLock{holdSet{q: c.queue, group: keyspace.SharedValue, suffix: readersSuffix}}, nil
	case kindReentrant:
		owner := cfg.owner
		if owner == "" {
			owner, _ = ownerFromContext(ctx)
		}
		if owner == "" || owner == keyspace.SharedValue {
			return nil, ErrInvalidOwner
		}
		return reentrantLock{holdSet{q: c.queue, group: reentrantValue(owner), suffix: holdsSuffix}}, nil
	case kindSemaphore:
		return semaphore{q: c.queue, limit: cfg.limit, permits: cfg.permits}, nil
	}
	if cfg.proto == nil {
		return c.token, nil
	}
	return cfg.proto, nil
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
