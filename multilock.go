package dlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/engine/multikey"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/redis/go-redis/v9"
)

// LockMulti acquires every key in keys, all or nothing, waiting until it
// has them all or ctx ends. Each key is an ordinary exclusive lock (the
// same as Lock's), holding the same token; duplicates are ignored. The
// returned *Lock covers them all: one lease renewed by the watchdog, one
// Done/Err, Unlock releases every key, Keys lists them and FenceOf gives
// each key's fencing token.
//
// Keys that share a Cluster slot (all keys, on a plain server or Sentinel)
// are taken by one script: one round trip uncontended. Keys in different
// slots (or Ring shards) are taken slot by slot in a canonical order (slot,
// then key), and a failed TryLockMulti releases what it took. A waiting
// LockMulti holds, in that order, the keys it has got while it queues for
// the next one (renewing them with each retry), so two lockers of
// overlapping sets ({a,b} and {b,a}) cannot deadlock: both take the lower
// key first. It returns only with all keys held, or none.
//
// Options: WithTTL and WithoutRenewal; WithProtocol is ErrInvalidOpts,
// as is a Client with MinReplicas. An empty keys is ErrEmptyKey. Hooks
// and errors name the first key in the canonical order (Keys()[0]).
func (c *Client) LockMulti(ctx context.Context, keys []string, opts ...LockOption) (*Lock, error) {
	return c.acquireMulti(ctx, keys, true, opts)
}

// TryLockMulti makes one attempt to acquire every key in keys (see
// LockMulti). If any is held, it takes none and returns a
// *NotAcquiredError naming the first held key.
func (c *Client) TryLockMulti(ctx context.Context, keys []string, opts ...LockOption) (*Lock, error) {
	return c.acquireMulti(ctx, keys, false, opts)
}

// DoMulti runs fn while holding every key in keys (see LockMulti and Do).
func (c *Client) DoMulti(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...LockOption) error {
	lk, err := c.LockMulti(ctx, keys, opts...)
	if err != nil {
		return err
	}
	return c.run(ctx, lk, fn)
}

func (c *Client) acquireMulti(ctx context.Context, keys []string, wait bool, opts []LockOption) (*Lock, error) {
	start := time.Now()
	if ctx == nil {
		return nil, ErrNilContext
	}
	if len(keys) == 0 {
		return nil, ErrEmptyKey
	}
	for _, k := range keys {
		if err := validKey(c.opts.Prefix, k); err != nil {
			return nil, err
		}
	}
	cfg, err := c.lockConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.withProto || c.opts.MinReplicas > 0 {
		return nil, fmt.Errorf("%w: a multi-key lock takes exclusive token locks only (no WithProtocol or MinReplicas)", ErrInvalidOpts)
	}
	if c.closed() {
		return nil, ErrClosed
	}
	groups := c.multiGroups(keys)
	var proto engine.Protocol = groups[0]
	if len(groups) > 1 {
		proto = multikey.Slots{Queue: c.queue, Groups: groups}
	}
	return c.obtain(ctx, start, groups[0].KeysOf[0], proto, cfg, wait)
}

// multiGroups sorts keys (without duplicates) into the canonical order and
// splits them into groups that one script may touch: by Cluster slot, by
// Ring shard, or one group on a single server.
func (c *Client) multiGroups(keys []string) []multikey.Lock {
	type entry struct{ group, key string }
	es := make([]entry, 0, len(keys))
	for _, k := range keys {
		es = append(es, entry{c.groupOf(k), k})
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.key, b.key)) })
	es = slices.Compact(es)
	var groups []multikey.Lock
	for i, e := range es {
		if i == 0 || e.group != es[i-1].group {
			groups = append(groups, multikey.Lock{Queue: c.queue})
		}
		g := &groups[len(groups)-1]
		g.Keys = append(g.Keys, e.key)
		g.KeysOf = append(g.KeysOf, c.keysFor(e.key))
	}
	return groups
}

// groupOf names the part of the deployment key lives on: its Cluster slot
// (zero-padded, so groups sort by slot), its Ring shard, or "" (one
// server: every key in one group).
func (c *Client) groupOf(key string) string {
	switch r := c.rdb.(type) {
	case *redis.ClusterClient:
		return fmt.Sprintf("%05d", keyspace.Slot(key))
	case *redis.Ring:
		if shard, err := r.GetShardClientForKey(key); err == nil {
			return shard.Options().Addr
		}
		return ""
	}
	if c.splitSlots {
		return fmt.Sprintf("%05d", keyspace.Slot(key))
	}
	return ""
}
