// inspect.go owns Inspect: what a key holds (its kind, holders, fence and
// TTL), read without taking it.

package admin

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Kind names what a lock key's value looks like, as Inspect sees it.
type Kind string

const (
	KindFree      Kind = ""          // the key does not exist
	KindToken     Kind = "token"     // a dlock token (22 base64url characters)
	KindLegacy    Kind = "legacy"    // a decimal Unix timestamp: the SETNX/GETSET timestamp lock of older C# and Python code
	KindForeign   Kind = "foreign"   // another string: some other SET NX client's token
	KindShared    Kind = "shared"    // read-locked (dlock.RWLock's readers): the key holds SharedValue
	KindReentrant Kind = "reentrant" // a reentrant owner's hold (dlock.Reentrant): the key names the owner
	KindSemaphore Kind = "semaphore" // a dlock semaphore (a sorted set of permit holders)
	KindWrongType Kind = "wrongtype" // any other type: not a lock at all
)

// Info is what Inspect and List report about one lock key.
type Info struct {
	Key   string
	Held  bool   // the key is held: a string, or a semaphore with holders
	Kind  Kind   // what its value looks like
	Value string // the stored value (holder's token or timestamp, the owner id of a reentrant hold); "" if free
	// Tokens are the handles' tokens of a shared, reentrant or semaphore
	// hold (the members of its hold set), the first 100 by lease end: each
	// releases its own handle with ReleaseToken.
	Tokens []string
	// Aux names the auxiliary keys of this lock that exist (fence counter,
	// queue, hold sets, semaphore permits and limit, Counter segment,
	// fenced-resource guard, an election's leader records), in the order
	// of the AuxKind constants.
	Aux []string
	// TTL is the key's remaining time to live: -1 if it has none, 0 if free.
	TTL time.Duration
	// Fence is the last fencing token handed out for the key (0: none
	// recorded, or the counter expired).
	Fence uint64
	// Queued counts the entries of the key's FIFO wait queue (waiters whose
	// lease lapsed stay counted until a release skips them).
	Queued int64
	// Holders counts the live leases behind a shared lock (readers) or a
	// semaphore (permit holders); Permits is the semaphore's permits in use
	// and Limit its run-time limit (0: none set by Semaphore.SetLimit).
	Holders, Permits, Limit int64
	// Subscribers counts connections subscribed to the key's wake-up channel
	// (PUBSUB NUMSUB; on Redis Cluster, NUMSUB summed over every node, plus
	// PUBSUB SHARDNUMSUB on the master of the key's slot, where dlock
	// Clients subscribe it by SSUBSCRIBE): clients with a Barging or
	// non-queueing Lock call waiting.
	Subscribers int64
}

// auxNames returns the names of the auxiliary keys of ks (every entry of
// the one suffix table but the pub/sub channels, which are no keys), in table
// order.
func auxNames(ks protocol.Keys) []string {
	var out []string
	for _, a := range keyspace.Table {
		switch a.Suffix {
		case keyspace.WakeSuffix, keyspace.ElectedSuffix:
		case keyspace.GuardSuffix:
			out = append(out, keyspace.GuardKey(ks.Lock))
		default:
			out = append(out, keyspace.Aux(ks, a.Suffix))
		}
	}
	return out
}

// maxTokens bounds Info.Tokens.
const maxTokens = 100

// Inspect reports the state of key without changing it. A key that is one
// of dlock's auxiliary keys is refused (dlock.ErrReservedKey, naming its
// lock).
func (c *Client) Inspect(ctx context.Context, key string) (Info, error) {
	if ctx == nil {
		return Info{}, dlock.ErrNilContext
	}
	if err := c.validKey(key); err != nil {
		return Info{}, err
	}
	ks := c.KeysFor(key)
	info := Info{Key: key}
	aux := auxNames(ks)
	var typ *redis.StatusCmd
	var val *redis.StringCmd
	var pttl *redis.DurationCmd
	var fence *redis.StringCmd
	var subs *redis.MapStringIntCmd
	var queued, holders, readers, holds *redis.IntCmd
	var used, limit *redis.StringCmd
	var members, readerTokens, holdTokens *redis.StringSliceCmd
	exists := make([]*redis.IntCmd, len(aux))
	_, err := c.exec.Pipelined(ctx, func(p redis.Pipeliner) error {
		typ = p.Type(ctx, key)
		val = p.Get(ctx, key)
		pttl = p.PTTL(ctx, key)
		fence = p.Get(ctx, ks.Fence)
		subs = p.PubSubNumSub(ctx, ks.Wake)
		queued = p.LLen(ctx, ks.Queue)
		holders = p.ZCard(ctx, key) // a semaphore (errors on any other type: ignored)
		members = p.ZRange(ctx, key, 0, maxTokens-1)
		readers = p.ZCard(ctx, keyspace.Aux(ks, keyspace.ReadersSuffix))
		readerTokens = p.ZRange(ctx, keyspace.Aux(ks, keyspace.ReadersSuffix), 0, maxTokens-1)
		holds = p.ZCard(ctx, keyspace.Aux(ks, keyspace.HoldsSuffix))
		holdTokens = p.ZRange(ctx, keyspace.Aux(ks, keyspace.HoldsSuffix), 0, maxTokens-1)
		used = p.HGet(ctx, keyspace.Aux(ks, keyspace.PermitsSuffix), "#used")
		limit = p.Get(ctx, keyspace.Aux(ks, keyspace.LimitSuffix))
		for i, name := range aux {
			exists[i] = p.Exists(ctx, name)
		}
		return nil
	})
	if typ.Err() != nil {
		return info, unavailable(typ.Err())
	}
	_ = err // per-command errors are read below
	if f, err := fence.Uint64(); err == nil {
		info.Fence = f
	}
	for i, e := range exists {
		if e.Val() > 0 {
			info.Aux = append(info.Aux, aux[i])
		}
	}
	if n, ok := c.clusterSubscribers(ctx, ks.Wake); ok {
		info.Subscribers = n
	} else {
		info.Subscribers = subs.Val()[ks.Wake]
	}
	info.Queued = queued.Val()
	switch typ.Val() {
	case "none":
		return info, nil
	case "string":
	case "zset":
		// A semaphore: held while any permit is leased.
		info.Kind = KindSemaphore
		info.Holders = holders.Val()
		info.Tokens = members.Val()
		info.Permits, _ = used.Int64()
		info.Limit, _ = limit.Int64()
		info.Held = info.Holders > 0
		if d := pttl.Val(); d > 0 {
			info.TTL = d
		}
		return info, nil
	default:
		info.Kind = KindWrongType
		return info, nil
	}
	if val.Err() != nil {
		if errors.Is(val.Err(), redis.Nil) { // expired between the commands
			return info, nil
		}
		return info, unavailable(val.Err())
	}
	info.Held = true
	info.Value = val.Val()
	info.Kind = classify(info.Value)
	switch {
	case info.Value == SharedValue:
		info.Kind, info.Holders, info.Tokens = KindShared, readers.Val(), readerTokens.Val()
	default:
		if owner, ok := ReentrantOwner(info.Value); ok {
			info.Kind, info.Holders, info.Tokens = KindReentrant, holds.Val(), holdTokens.Val()
			info.Value = owner
		}
	}
	switch d := pttl.Val(); {
	case d > 0:
		info.TTL = d
	case d == -1:
		info.TTL = -1
	}
	return info, nil
}

// clusterSubscribers counts, on a Cluster, the subscriptions to the
// wake-up channel wake: the plain ones on every node (PUBSUB NUMSUB counts
// a node's own; a PUBLISH reaches them all) and the sharded ones on the
// master of its slot (PUBSUB SHARDNUMSUB), where dlock Clients subscribe
// it. ok is false elsewhere. A node that does not answer counts 0.
func (c *Client) clusterSubscribers(ctx context.Context, wake string) (n int64, ok bool) {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return 0, false
	}
	var mu sync.Mutex
	_ = cc.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
		v := node.PubSubNumSub(ctx, wake).Val()[wake]
		mu.Lock()
		n += v
		mu.Unlock()
		return nil
	})
	if m, err := cc.MasterForKey(ctx, wake); err == nil {
		n += m.PubSubShardNumSub(ctx, wake).Val()[wake]
	}
	return n, true
}

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`)

func classify(v string) Kind {
	if tokenRE.MatchString(v) {
		return KindToken
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 && len(v) >= 9 && len(v) <= 13 {
		return KindLegacy
	}
	return KindForeign
}
