// Package multikey holds the protocols of package dlock's multi-key locks
// (Client.LockMulti): Lock for keys that share a Cluster slot (one script
// takes them all), Slots for keys over several slots (one Lock per slot,
// taken in the canonical order). The root package sorts the keys into
// their groups; the engine runs the protocols like any other.
package multikey

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Reply codes shared by the acquire, extend and release scripts (see
// package protocol), and acquire's when the key is free but live waiters
// are ahead.
const (
	codeOK        = protocol.ReplyOK
	codeGone      = protocol.ReplyGone
	codeOther     = protocol.ReplyOtherOwner
	codeWrongType = protocol.ReplyWrongType
	freeButQueued = -2
)

// The optional methods the engine looks for (see internal/engine's
// calls.go).
var (
	_ engine.Protocol     = Lock{}
	_ engine.Protocol     = Slots{}
	_ engine.Slotted      = Slots{}
	_ engine.Direct       = Slots{}
	_ engine.ResendTeller = Lock{}
	_ engine.ResendTeller = Slots{}
	_ engine.Leaver       = Lock{}
)

// Lock is the protocol of a multi-key lock whose keys share a slot:
// each key a token lock holding the same token, taken, renewed (extend.lua
// over all pairs) and released by one script each.
type Lock struct {
	Queue  *engine.Queue   // the Client's queue settings
	Keys   []string        // in the canonical order
	KeysOf []protocol.Keys // the Keys of each
}

// Acquire makes one attempt on every key; a grant has the fence of each.
func (m Lock) Acquire(ctx context.Context, a engine.Attempt, _ protocol.Keys, token string, ttl time.Duration) (engine.Grant, error) {
	names := make([]string, 0, 5*len(m.KeysOf))
	for _, k := range m.KeysOf {
		names = append(names, k.Lock, k.Fence, k.Queue, k.Waiters, k.Tombs)
	}
	res, err := a.On().Run(ctx, protocol.Call{Script: scripts.MultiAcquire, Keys: names, Args: []any{token, ttl.Milliseconds(), engine.FenceTTL(ttl).Milliseconds(),
		a.Mode.String(), a.Handoff(m.KeysOf[0]), a.Lease.Milliseconds()}}).Int64Slice()
	g := engine.Grant{Grant: protocol.Grant{Value: token}}
	switch {
	case err != nil:
		return g, err
	case len(res) == len(m.Keys)+1 && res[0] == codeOK:
		g.Acquired, g.Multi = true, &engine.MultiKeys{Keys: m.Keys, Fences: make([]uint64, len(m.Keys))}
		for i, f := range res[1:] {
			g.Multi.Fences[i] = uint64(f)
		}
		g.Fence = g.Multi.Fences[0]
		return g, nil
	case len(res) != 3:
		return g, errors.New("dlock: unexpected reply from the multi-key acquire script")
	case res[0] == codeWrongType:
		return engine.Grant{}, errs.ErrWrongType
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
func (Lock) Queued() bool { return true }

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

func (m Lock) Renew(_ protocol.Keys, token string, ttl time.Duration) (protocol.Call, string) {
	names := make([]string, 0, 2*len(m.KeysOf))
	for _, k := range m.KeysOf {
		names = append(names, k.Lock, k.Fence)
	}
	return protocol.Call{Script: scripts.Extend, Keys: names, Args: []any{token, ttl.Milliseconds(), engine.FenceTTL(ttl).Milliseconds()}}, token
}

// Release releases every key holding token and leaves every key's queue,
// so it is also Leave (a waiter that gives up, holding some keys or not).
func (m Lock) Release(_ protocol.Keys, token string) protocol.Call { return m.release(token, "0") }

// Leave is Release, and the token is given up for good: every queue keeps
// a tombstone of it, which the acquire scripts refuse.
func (m Lock) Leave(_ protocol.Keys, token string) protocol.Call { return m.release(token, "1") }

// release builds multi_release.lua's call; mode is '0' (release), '1'
// (leave for good) or 'r' (roll back an attempt whose token goes on).
func (m Lock) release(token, mode string) protocol.Call {
	names := make([]string, 0, 4*len(m.KeysOf))
	args := []any{token, m.Queue.Pickup.Milliseconds()}
	for _, k := range m.KeysOf {
		names = append(names, k.Lock, k.Queue, k.Waiters, k.Tombs)
		args = append(args, m.Queue.Wake(k))
	}
	return protocol.Call{Script: scripts.MultiRelease, Keys: names, Args: append(args, mode)}
}

// Slots is the protocol of a multi-key lock over several slots: one
// Lock per slot, taken in the canonical order; renewed and released
// directly, with one pipeline of per-slot scripts (go-redis sends each to
// its node).
type Slots struct {
	Queue  *engine.Queue // the Client's queue settings
	Groups []Lock
}

// group returns the protocol of the i-th slot.
func (m Slots) group(i int) Lock { return m.Groups[i] }

// Queued: a multi-key lock's waiters queue in Redis.
func (Slots) Queued() bool { return true }

// WaiterSlots lists the slots a waiter may queue in: the slot of each
// group, in turn (see engine.Slotted).
func (m Slots) WaiterSlots() []int {
	slots := make([]int, 0, len(m.Groups))
	for _, g := range m.Groups {
		slots = append(slots, keyspace.Slot(g.KeysOf[0].Lock))
	}
	return slots
}

// Acquire takes the groups in order. In try and barge modes a group it
// cannot take makes it release the groups taken before (all or nothing);
// queued, it keeps them and queues for the next (see Client.LockMulti).
func (m Slots) Acquire(ctx context.Context, a engine.Attempt, _ protocol.Keys, token string, ttl time.Duration) (engine.Grant, error) {
	all := engine.Grant{Grant: protocol.Grant{Value: token, Acquired: true}, Multi: &engine.MultiKeys{}}
	for i := range m.Groups {
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
		case i > 0 && (errors.Is(err, errs.ErrWrongType) || errors.Is(err, errs.ErrInvalidArgument)):
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
func (m Slots) Renew(k protocol.Keys, token string, ttl time.Duration) (protocol.Call, string) {
	return m.group(0).Renew(k, token, ttl)
}

func (m Slots) Release(k protocol.Keys, token string) protocol.Call {
	return m.group(0).Release(k, token)
}

func (m Slots) RenewDirect(ctx context.Context, _ protocol.Keys, token string, ttl time.Duration) (string, int64, error) {
	calls := make([]protocol.Call, len(m.Groups))
	for i := range m.Groups {
		g := m.group(i)
		calls[i], _ = g.Renew(g.KeysOf[0], token, ttl)
	}
	code, err := worstReply(m.Queue.Exec.Batch(ctx, calls))
	return token, code, err
}

// ReleaseDirect releases every slot's keys that hold token, and leaves
// their queues for good (it is also the withdrawal of a waiter, or of an
// abandoned acquire: see Lock.Leave).
func (m Slots) ReleaseDirect(ctx context.Context, _ protocol.Keys, token string) (int64, error) {
	calls := make([]protocol.Call, len(m.Groups))
	for i := range m.Groups {
		g := m.group(i)
		calls[i] = g.Leave(g.KeysOf[0], token)
	}
	return worstReply(m.Queue.Exec.Batch(ctx, calls))
}

// ReleaseTellsResend: multi_release.lua answers a second run of a release
// that ran by each key's tombstone (see engine.ResendTeller).
func (Lock) ReleaseTellsResend() {}

// ReleaseTellsResend: as Lock's, slot by slot.
func (Slots) ReleaseTellsResend() {}

// rollback gives back what an attempt took, for a token that goes on
// (the next attempt, e.g. a queued one after TryLock's, uses it again).
func (m Slots) rollback(ctx context.Context, token string) (int64, error) {
	calls := make([]protocol.Call, len(m.Groups))
	for i := range m.Groups {
		calls[i] = m.group(i).release(token, "r")
	}
	return worstReply(m.Queue.Exec.Batch(ctx, calls))
}

// worstReply combines the replies of per-slot renewals or releases: a
// loss anywhere is the answer (wrong type, then stolen by an operator,
// then another owner, then gone); otherwise a Redis error; otherwise 1.
func worstReply(cmds []*redis.Cmd) (int64, error) {
	rank := map[int64]int{codeOK: 0, codeGone: 1, codeOther: 2, engine.CodeStolen: 3, codeWrongType: 4}
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
