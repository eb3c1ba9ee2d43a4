package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/keyspace"
	"slices"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
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
		proto = multiSlots{q: c.queue, groups: groups}
	}
	return c.obtain(ctx, start, groups[0].ks[0], proto, cfg, wait)
}

// multiGroups sorts keys (without duplicates) into the canonical order and
// splits them into groups that one script may touch: by Cluster slot, by
// Ring shard, or one group on a single server.
func (c *Client) multiGroups(keys []string) []multiLock {
	type entry struct{ group, key string }
	es := make([]entry, 0, len(keys))
	for _, k := range keys {
		es = append(es, entry{c.groupOf(k), k})
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.key, b.key)) })
	es = slices.Compact(es)
	var groups []multiLock
	for i, e := range es {
		if i == 0 || e.group != es[i-1].group {
			groups = append(groups, multiLock{q: c.queue})
		}
		g := &groups[len(groups)-1]
		g.keys = append(g.keys, e.key)
		g.ks = append(g.ks, c.keysFor(e.key))
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

// multiLock is the protocol of a multi-key lock whose keys share a slot:
// each key a token lock holding the same token, taken, renewed (extend.lua
// over all pairs) and released by one script each.
type multiLock struct {
	q    *engine.Queue   // the Client's queue settings
	keys []string        // in the canonical order
	ks   []protocol.Keys // the Keys of each
}

// Acquire makes one attempt on every key; a grant has the fence of each.
func (m multiLock) Acquire(ctx context.Context, a engine.Attempt, _ protocol.Keys, token string, ttl time.Duration) (engine.Grant, error) {
	names := make([]string, 0, 5*len(m.ks))
	for _, k := range m.ks {
		names = append(names, k.Lock, k.Fence, k.Queue, k.Waiters, k.Tombs)
	}
	res, err := a.On().Run(ctx, protocol.Call{Script: scripts.MultiAcquire, Keys: names, Args: []any{token, ttl.Milliseconds(), engine.FenceTTL(ttl).Milliseconds(),
		a.Mode.String(), a.Handoff(m.ks[0]), a.Lease.Milliseconds()}}).Int64Slice()
	g := engine.Grant{Grant: protocol.Grant{Value: token}}
	switch {
	case err != nil:
		return g, err
	case len(res) == len(m.keys)+1 && res[0] == codeOK:
		g.Acquired, g.Multi = true, &engine.MultiKeys{Keys: m.keys, Fences: make([]uint64, len(m.keys))}
		for i, f := range res[1:] {
			g.Multi.Fences[i] = uint64(f)
		}
		g.Fence = g.Multi.Fences[0]
		return g, nil
	case len(res) != 3:
		return g, errors.New("dlock: unexpected reply from the multi-key acquire script")
	case res[0] == codeWrongType:
		return engine.Grant{}, ErrWrongType
	}
	g.HolderTTL = time.Duration(res[1]) * time.Millisecond
	if res[1] == freeButQueued {
		g.HolderTTL = 0
	}
	if res[2] > 1 {
		holding(a.Mode, &g.Grant, ttl)
	}
	return g, nil
}

// Queued: a multi-key lock's waiters queue in Redis.
func (multiLock) Queued() bool { return true }

// holding bounds the retry of a waiter (in mode m) that holds some keys
// while it waits for the next: its retries renew them, so they must come
// within a third of their TTL.
func holding(m engine.Mode, g *protocol.Grant, ttl time.Duration) {
	if !m.Queued() {
		return
	}
	if g.HolderTTL <= 0 || g.HolderTTL > ttl/3 {
		g.HolderTTL = max(ttl/3, time.Millisecond)
	}
}

func (m multiLock) Renew(_ protocol.Keys, token string, ttl time.Duration) (protocol.Call, string) {
	names := make([]string, 0, 2*len(m.ks))
	for _, k := range m.ks {
		names = append(names, k.Lock, k.Fence)
	}
	return protocol.Call{Script: scripts.Extend, Keys: names, Args: []any{token, ttl.Milliseconds(), engine.FenceTTL(ttl).Milliseconds()}}, token
}

// Release releases every key holding token and leaves every key's queue,
// so it is also Leave (a waiter that gives up, holding some keys or not).
func (m multiLock) Release(_ protocol.Keys, token string) protocol.Call { return m.release(token, "0") }

// Leave is Release, and the token is given up for good: every queue keeps
// a tombstone of it, which the acquire scripts refuse.
func (m multiLock) Leave(_ protocol.Keys, token string) protocol.Call { return m.release(token, "1") }

// release builds multi_release.lua's call; mode is '0' (release), '1'
// (leave for good) or 'r' (roll back an attempt whose token goes on).
func (m multiLock) release(token, mode string) protocol.Call {
	names := make([]string, 0, 4*len(m.ks))
	args := []any{token, m.q.Pickup.Milliseconds()}
	for _, k := range m.ks {
		names = append(names, k.Lock, k.Queue, k.Waiters, k.Tombs)
		args = append(args, m.q.Wake(k))
	}
	return protocol.Call{Script: scripts.MultiRelease, Keys: names, Args: append(args, mode)}
}

// multiSlots is the protocol of a multi-key lock over several slots: one
// multiLock per slot, taken in the canonical order; renewed and released
// directly, with one pipeline of per-slot scripts (go-redis sends each to
// its node).
type multiSlots struct {
	q      *engine.Queue // the Client's queue settings
	groups []multiLock
}

// group returns the protocol of the i-th slot.
func (m multiSlots) group(i int) multiLock { return m.groups[i] }

// Queued: a multi-key lock's waiters queue in Redis.
func (multiSlots) Queued() bool { return true }

// WaiterSlots lists the slots a waiter may queue in: the slot of each
// group, in turn (see engine.Slotted).
func (m multiSlots) WaiterSlots() []int {
	slots := make([]int, 0, len(m.groups))
	for _, g := range m.groups {
		slots = append(slots, keyspace.Slot(g.ks[0].Lock))
	}
	return slots
}

// Acquire takes the groups in order. In try and barge modes a group it
// cannot take makes it release the groups taken before (all or nothing);
// queued, it keeps them and queues for the next (see LockMulti).
func (m multiSlots) Acquire(ctx context.Context, a engine.Attempt, _ protocol.Keys, token string, ttl time.Duration) (engine.Grant, error) {
	all := engine.Grant{Grant: protocol.Grant{Value: token, Acquired: true}, Multi: &engine.MultiKeys{}}
	for i := range m.groups {
		grp := m.group(i)
		g, err := grp.Acquire(ctx, a, protocol.Keys{}, token, ttl)
		if err == nil && g.Acquired {
			all.Multi.Keys = append(all.Multi.Keys, g.Multi.Keys...)
			all.Multi.Fences = append(all.Multi.Fences, g.Multi.Fences...)
			continue
		}
		switch {
		case i > 0 && !a.Mode.Queued():
			// Roll back. If that fails, the engine retries it in the
			// background (Value is set: the withdrawal is token-checked).
			if _, rerr := m.rollback(ctx, token); rerr != nil {
				return engine.Grant{Grant: protocol.Grant{Value: token}}, &engine.KeptError{Acquire: err, Rollback: rerr}
			}
		case i > 0 && (errors.Is(err, ErrWrongType) || errors.Is(err, ErrInvalidArgument)):
			// Queued, the slots before i stay ours while we wait. A verdict
			// such as a wrong type ends the call with them taken: the
			// engine must withdraw the token. Any other error ends only
			// this attempt (below): the waiter keeps its slots and its
			// places in the queues, and the next attempt renews them; if
			// the error ends the call (the first attempt, or ctx), the
			// wait withdraws the token.
			return engine.Grant{Grant: protocol.Grant{Value: token}}, &engine.KeptError{Acquire: err}
		case i > 0:
			holding(a.Mode, &g.Grant, ttl)
		}
		g.Value = token
		return g, err
	}
	all.Fence = all.Multi.Fences[0]
	return all, nil
}

// Renew and Release are not used (the engine calls RenewDirect and
// ReleaseDirect); they cover the first slot only.
func (m multiSlots) Renew(k protocol.Keys, token string, ttl time.Duration) (protocol.Call, string) {
	return m.group(0).Renew(k, token, ttl)
}

func (m multiSlots) Release(k protocol.Keys, token string) protocol.Call {
	return m.group(0).Release(k, token)
}

func (m multiSlots) RenewDirect(ctx context.Context, _ protocol.Keys, token string, ttl time.Duration) (string, int64, error) {
	calls := make([]protocol.Call, len(m.groups))
	for i := range m.groups {
		g := m.group(i)
		calls[i], _ = g.Renew(g.ks[0], token, ttl)
	}
	code, err := worstReply(m.q.Exec.Batch(ctx, calls))
	return token, code, err
}

// ReleaseDirect releases every slot's keys that hold token, and leaves
// their queues for good (it is also the withdrawal of a waiter, or of an
// abandoned acquire: see multiLock.Leave).
func (m multiSlots) ReleaseDirect(ctx context.Context, _ protocol.Keys, token string) (int64, error) {
	calls := make([]protocol.Call, len(m.groups))
	for i := range m.groups {
		g := m.group(i)
		calls[i] = g.Leave(g.ks[0], token)
	}
	return worstReply(m.q.Exec.Batch(ctx, calls))
}

// ReleaseTellsResend: multi_release.lua answers a second run of a release
// that ran by each key's tombstone (see engine.ResendTeller).
func (multiLock) ReleaseTellsResend() {}

// ReleaseTellsResend: as multiLock's, slot by slot.
func (multiSlots) ReleaseTellsResend() {}

// rollback gives back what an attempt took, for a token that goes on
// (the next attempt, e.g. a queued one after TryLock's, uses it again).
func (m multiSlots) rollback(ctx context.Context, token string) (int64, error) {
	calls := make([]protocol.Call, len(m.groups))
	for i := range m.groups {
		calls[i] = m.group(i).release(token, "r")
	}
	return worstReply(m.q.Exec.Batch(ctx, calls))
}

// worstReply combines the replies of per-slot renewals or releases: a
// loss anywhere is the answer (wrong type, then another owner, then gone);
// otherwise a Redis error; otherwise 1.
func worstReply(cmds []*redis.Cmd) (int64, error) {
	rank := map[int64]int{codeOK: 0, codeGone: 1, codeOther: 2, codeWrongType: 3}
	code := int64(codeOK)
	var firstErr error
	for _, cmd := range cmds {
		c, err := cmd.Int64()
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		if rank[c] > rank[code] {
			code = c
		}
	}
	if code == codeOK && firstErr != nil {
		return 0, firstErr
	}
	return code, nil
}
