package dlock

import (
	"context"
	_ "embed"
	"errors"
	"slices"
	"time"

	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Bulk calls. The watchdog's renewals and Close's releases of single-key
// token locks are sent as one script call per group of locks that one
// call may touch (one server: all of them; a Cluster: one slot; a Ring:
// one shard), up to bulkMax locks each, rather than one EVALSHA per lock:
// Redis runs one script instead of hundreds, and the client builds and
// reads one command. Each lock still gets its own reply, the same one its
// single call would have got, so the engine applies it the same way.
// Calls a bulk script cannot serve (other primitives, multi-key locks,
// a Leave) and groups of one go out as they are, in the same pipeline.
var (
	//go:embed scripts/extend_many.lua
	extendManySrc string
	//go:embed scripts/release_many.lua
	releaseManySrc string

	extendManyScript  = libScript(extendManySrc)
	releaseManyScript = libScript(releaseManySrc)
)

// bulkMax caps the locks of one bulk call. Redis runs a script without
// interruption: at a few microseconds per lock, a call of bulkMax keeps
// other clients waiting well under a millisecond.
const bulkMax = 64

// reply is one call's integer reply, or its error.
type reply struct {
	code int64
	err  error
}

// errBulkReply: a bulk call answered with something other than one reply
// per lock. Not a Redis error reply, so the engine treats it as a reply it
// could not read (the call may have run).
var errBulkReply = errors.New("dlock: unexpected reply from a bulk script")

// bulkOf returns the bulk script that can serve c along with others like
// it, or nil. Such a call's first three arguments are the bulk script's
// triple for its lock, and its two keys the pair.
func bulkOf(c protocol.Call) *redis.Script {
	switch {
	case c.Script == extendScript && len(c.Keys) == 2 && len(c.Args) == 3:
		return extendManyScript
	case c.Script == releaseScript && len(c.Keys) == 2 && len(c.Args) == 4 && c.Args[3] == "0":
		return releaseManyScript
	}
	return nil
}

// runCalls runs calls, each with an integer reply, in one pipeline (split
// per Cluster node or Ring shard by go-redis), merging what a bulk script
// can serve, and returns each call's reply in order.
func (c *Client) runCalls(ctx context.Context, calls []protocol.Call) []reply {
	type groupKey struct {
		s  *redis.Script
		at string
	}
	var (
		sent   []protocol.Call
		owners [][]int            // owners[j]: the calls sent[j] answers for
		bulk   []bool             // sent[j] is a bulk call
		groups map[groupKey][]int // by Cluster slot or Ring shard
		order  []groupKey
		plain  [][]int // plain[n]: order[n]'s calls, if on one server
	)
	for i, call := range calls {
		s := bulkOf(call)
		if s == nil {
			sent, owners, bulk = append(sent, call), append(owners, []int{i}), append(bulk, false)
			continue
		}
		k := groupKey{s, c.groupOf(call.Keys[0])}
		if k.at == "" { // one server: one group per script, no map
			if j := slices.Index(order, k); j >= 0 {
				plain[j] = append(plain[j], i)
			} else {
				order, plain = append(order, k), append(plain, []int{i})
			}
			continue
		}
		if groups == nil {
			groups = make(map[groupKey][]int)
		}
		if _, ok := groups[k]; !ok {
			order, plain = append(order, k), append(plain, nil)
		}
		groups[k] = append(groups[k], i)
	}
	for n, k := range order {
		ids := plain[n]
		if k.at != "" {
			ids = groups[k]
		}
		if len(ids) == 1 {
			sent, owners, bulk = append(sent, calls[ids[0]]), append(owners, ids), append(bulk, false)
			continue
		}
		for len(ids) > 0 {
			part := ids[:min(len(ids), bulkMax)]
			ids = ids[len(part):]
			b := protocol.Call{Script: k.s, Keys: make([]string, 0, 2*len(part)), Args: make([]any, 0, 3*len(part))}
			for _, i := range part {
				b.Keys = append(b.Keys, calls[i].Keys...)
				b.Args = append(b.Args, calls[i].Args[:3]...)
			}
			sent, owners, bulk = append(sent, b), append(owners, part), append(bulk, true)
		}
	}
	out := make([]reply, len(calls))
	for j, cmd := range runBatch(ctx, c.rdb, sent) {
		if !bulk[j] {
			code, err := cmd.Int64()
			out[owners[j][0]] = reply{code, err}
			continue
		}
		codes, err := cmd.Int64Slice()
		if err == nil && len(codes) != len(owners[j]) {
			err = errBulkReply
		}
		for n, i := range owners[j] {
			if err != nil {
				out[i] = reply{0, err}
			} else {
				out[i] = reply{codes[n], nil}
			}
		}
	}
	return out
}

// fenceMargin is how long a lock's fence counter must outlive the
// validity a renewal buys for the renewal to leave the counter's TTL
// alone: room for a renewal that runs late (queued, re-sent).
const fenceMargin = 5 * time.Second

// leanFence drops the fence counter's TTL push from the bulk-renewable
// call c, sent at sent for ttl, while the counter, as last pushed out,
// outlives what this renewal buys by fenceMargin: the renewal then runs
// two commands, not three. It reports whether c still pushes it. The
// counter only has to outlive the lock (`dlock list` finds locks by it);
// fencing stays monotonic even if it expires (see internal/lualib/fence.lua).
// Callers hold opMu.
func (l *lease) leanFence(c *protocol.Call, sent time.Time, ttl time.Duration) bool {
	if bulkOf(*c) != extendManyScript {
		return false
	}
	if l.c.wd.at(sent.Add(ttl+fenceMargin)) < l.fenceUntil {
		c.Args[2] = int64(0) // Renew made c.Args for this call alone
		return false
	}
	return true
}

// fencePushed records that a renewal sent at sent for ttl pushed the
// fence counter out. Callers hold opMu.
func (l *lease) fencePushed(sent time.Time, ttl time.Duration) {
	l.fenceUntil = l.c.wd.at(sent.Add(fenceTTL(ttl)))
}
