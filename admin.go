package dlock

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
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
	KindShared    Kind = "shared"    // read-locked (dlock.Shared): the key holds SharedValue
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
	// fenced-resource guard), in the order of the one suffix table (keys.go).
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
	// (PUBSUB NUMSUB on the node answering): clients with a Barging or
	// non-queueing Lock call waiting.
	Subscribers int64
}

// auxNames returns the names of the auxiliary keys of ks (every entry of
// the one suffix table but the pub/sub channels, which are no keys), in table
// order.
func (c *Client) auxNames(ks protocol.Keys) []string {
	var out []string
	for _, a := range auxTable {
		switch a.suffix {
		case wakeSuffix, electedSuffix:
		case guardSuffix:
			out = append(out, guardKey(ks.Lock))
		default:
			out = append(out, auxOf(ks, a.suffix))
		}
	}
	return out
}

// maxTokens bounds Info.Tokens.
const maxTokens = 100

// Inspect reports the state of key without changing it. A key that is one
// of dlock's auxiliary keys is refused (ErrReservedKey, naming its lock).
func (c *Client) Inspect(ctx context.Context, key string) (Info, error) {
	if ctx == nil {
		return Info{}, ErrNilContext
	}
	if err := validKey(c.opts.Prefix, key); err != nil {
		return Info{}, err
	}
	ks := c.keysFor(key)
	info := Info{Key: key}
	aux := c.auxNames(ks)
	var typ *redis.StatusCmd
	var val *redis.StringCmd
	var pttl *redis.DurationCmd
	var fence *redis.StringCmd
	var subs *redis.MapStringIntCmd
	var queued, holders, readers, holds *redis.IntCmd
	var used, limit *redis.StringCmd
	var members, readerTokens, holdTokens *redis.StringSliceCmd
	exists := make([]*redis.IntCmd, len(aux))
	_, err := readPipelined(ctx, c.rdb, func(p redis.Pipeliner) error {
		typ = p.Type(ctx, key)
		val = p.Get(ctx, key)
		pttl = p.PTTL(ctx, key)
		fence = p.Get(ctx, ks.Fence)
		subs = p.PubSubNumSub(ctx, ks.Wake)
		queued = p.LLen(ctx, ks.Queue)
		holders = p.ZCard(ctx, key) // a semaphore (errors on any other type: ignored)
		members = p.ZRange(ctx, key, 0, maxTokens-1)
		readers = p.ZCard(ctx, auxOf(ks, readersSuffix))
		readerTokens = p.ZRange(ctx, auxOf(ks, readersSuffix), 0, maxTokens-1)
		holds = p.ZCard(ctx, auxOf(ks, holdsSuffix))
		holdTokens = p.ZRange(ctx, auxOf(ks, holdsSuffix), 0, maxTokens-1)
		used = p.HGet(ctx, auxOf(ks, permitsSuffix), "#used")
		limit = p.Get(ctx, auxOf(ks, limitSuffix))
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
	info.Subscribers = subs.Val()[ks.Wake]
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

// List calls fn for the locks it finds, until fn returns false:
//   - every key dlock has locked recently (found by SCAN over this Client's
//     fence counters, "<Prefix>:*:fence", which live as long as the lock
//     plus 10s), whose key matches pattern ("" or "*": all);
//   - if pattern is not empty, also every key matching pattern (SCAN MATCH
//     pattern) that is a lock of any kind, so locks of other clients and of
//     the legacy protocol show too. A match that is one of dlock's
//     auxiliary keys is shown as its lock (whose Info.Aux lists it), never
//     as a lock of its own.
//
// Free keys are skipped, except a lock found through an auxiliary key
// that outlives holders (a semaphore limit, a Counter segment). On a
// Cluster every master is scanned, on a Ring every shard. Never KEYS.
// Pattern is Redis glob syntax.
func (c *Client) List(ctx context.Context, pattern string, fn func(Info) bool) error {
	if ctx == nil {
		return ErrNilContext
	}
	match, err := globRE(pattern)
	if err != nil {
		return fmt.Errorf("%w: pattern %q: %w", ErrInvalidArgument, pattern, err)
	}
	var mu sync.Mutex // guards seen and stop, and serialises fn
	seen := map[string]bool{}
	stop := false
	visit := func(key string, showFree bool) error {
		mu.Lock()
		defer mu.Unlock()
		if stop || seen[key] || validKey(c.opts.Prefix, key) != nil {
			return nil
		}
		info, err := c.Inspect(ctx, key)
		if errors.Is(err, ErrInvalidArgument) {
			return nil
		}
		if err != nil {
			return err
		}
		if !info.Held && !(showFree && lasting(info)) {
			return nil
		}
		seen[key] = true
		if !fn(info) {
			stop = true
		}
		return nil
	}
	scan := func(ctx context.Context, node redis.UniversalClient) error {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, globEscape(c.opts.Prefix)+":*"+fenceSuffix, 1000).Result()
			if err != nil {
				return unavailable(err)
			}
			for _, name := range keys {
				if k, ok := keyOfAux(c.opts.Prefix, fenceSuffix, name); ok && match.MatchString(k) {
					if err := visit(k, false); err != nil {
						return err
					}
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		if pattern == "" {
			return nil
		}
		for {
			keys, next, err := node.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return unavailable(err)
			}
			for _, k := range keys {
				lockKey, showFree := k, false
				if owner, _, ok := c.AuxKeyOf(k); ok {
					lockKey, showFree = owner, true
				}
				if err := visit(lockKey, showFree); err != nil {
					return err
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	return c.forEachNode(ctx, scan)
}

// lasting reports whether a free lock has auxiliary keys that outlive its
// holders (a semaphore limit, a Counter segment, a guard).
func lasting(info Info) bool {
	for _, name := range info.Aux {
		for _, suffix := range []string{limitSuffix, limitVSuffix, countSuffix, segsSuffix, guardSuffix} {
			if strings.HasSuffix(name, suffix) {
				return true
			}
		}
	}
	return false
}

// forEachNode runs fn on every master of a Cluster, every shard of a Ring,
// or the one server of a plain client.
func (c *Client) forEachNode(ctx context.Context, fn func(context.Context, redis.UniversalClient) error) error {
	switch r := c.rdb.(type) {
	case *redis.ClusterClient:
		return r.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return fn(ctx, n) })
	case *redis.Ring:
		return r.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return fn(ctx, n) })
	default:
		return fn(ctx, c.rdb)
	}
}

// globRE compiles a Redis glob (*, ?, [...], \x) to a regexp.
func globRE(pattern string) (*regexp.Regexp, error) {
	if pattern == "" {
		pattern = "*"
	}
	var b strings.Builder
	b.WriteString(`^`)
	for i := 0; i < len(pattern); i++ {
		switch ch := pattern[i]; ch {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '[':
			j := strings.IndexByte(pattern[i+1:], ']')
			if j < 0 {
				b.WriteString(`\[`)
				continue
			}
			class := pattern[i+1 : i+1+j]
			if strings.HasPrefix(class, "^") {
				class = "^" + regexp.QuoteMeta(class[1:])
			} else {
				class = regexp.QuoteMeta(class)
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\-`, `-`) + "]")
			i += j + 1
		case '\\':
			if i+1 < len(pattern) {
				i++
				b.WriteString(regexp.QuoteMeta(pattern[i : i+1]))
			}
		default:
			b.WriteString(regexp.QuoteMeta(string(ch)))
		}
	}
	b.WriteString(`$`)
	return regexp.Compile(b.String())
}

// ForceRelease releases key whoever holds it, for every kind of lock: an
// operator's steal, the one way to release a lock without its token. A
// token, legacy or foreign lock, a reentrant hold (all of its handles) or
// a read lock (all of its readers) is deleted and handed to the first
// queued waiter (or its waiters are woken); every holder of a semaphore
// gives its permits back (see ReleaseToken for where they go). The holders
// find out at their next renewal (ErrExpired or ErrTaken).
//
// It releases what it finds: a string lock only while the key still
// holds the value ForceRelease read, a semaphore's holders one by one by
// their tokens. So a release that lands after the key changed hands (a
// command delayed past its caller's timeout, or a hand-off between the
// read and the release) leaves the new holder alone. A read lock or a
// reentrant hold, whose value names no single grant, is released with
// whatever joined it since.
//
// It reports whether anything was released. A key that is neither a
// string nor a semaphore is left alone (ErrWrongType); one of dlock's
// auxiliary keys (a fence counter, a semaphore limit, a Counter segment,
// ...) is refused before any Redis call (ErrReservedKey).
func (c *Client) ForceRelease(ctx context.Context, key string) (bool, error) {
	if ctx == nil {
		return false, ErrNilContext
	}
	if err := validKey(c.opts.Prefix, key); err != nil {
		return false, err
	}
	ks := c.keysFor(key)
	var typ *redis.StatusCmd
	var members *redis.StringSliceCmd
	var val *redis.StringCmd
	_, _ = readPipelined(ctx, c.rdb, func(p redis.Pipeliner) error {
		typ = p.Type(ctx, key)
		members = p.ZRange(ctx, key, 0, -1)
		val = p.Get(ctx, key)
		return nil
	})
	if err := typ.Err(); err != nil {
		return false, unavailable(err)
	}
	switch typ.Val() {
	case "none":
		return false, nil
	case "string":
		return c.forceString(ctx, ks, val.Val())
	case "zset":
		// Every holder found gives its permits back, one script each.
		sem := c.adminSemaphore()
		released := false
		for _, m := range members.Val() {
			code, err := runScript(ctx, c.rdb, sem.release(ks, m, "force")).Int64()
			switch {
			case err != nil:
				return released, unavailable(err)
			case code == codeOK:
				released = true
			}
		}
		return released, nil
	default:
		return false, ErrWrongType
	}
}

// forceString releases the string lock key ks.Lock if it still holds v,
// the value ForceRelease read: a release that lands after the key changed
// hands (its command delayed past its caller's timeout) leaves the new
// holder alone.
func (c *Client) forceString(ctx context.Context, ks protocol.Keys, v string) (bool, error) {
	code, err := runScript(ctx, c.rdb, protocol.Call{Script: scripts.Release, Keys: []string{ks.Lock, ks.Queue},
		Args: []any{v, ks.Wake, c.opts.PickupTimeout.Milliseconds(), "force"}}).Int64()
	switch {
	case err != nil:
		return false, unavailable(err)
	case code == codeWrongType:
		return false, ErrWrongType
	}
	return code == codeOK, nil
}

// adminSemaphore is the semaphore protocol as admin calls use it to give
// permits back. The limit lives in the callers' handles (or in Redis, set
// by SetLimit), so an admin release passes none (0): it hands the freed
// permits to the queued waiters only under a stored limit; without one it
// wakes the first queued waiter, whose own acquire takes what its limit
// lets in (semaphore_release.lua).
func (c *Client) adminSemaphore() semaphore {
	return semaphore{queueMode: c.queueMode(modeTry), permits: 1}
}

// ReleaseToken releases the hold of token on key, as its holder's Unlock
// would: for a process that lost its *Lock (crashed and restarted), or
// another program, like `dlock release --token`. token is what the
// holder's Lock.Token returned (DLOCK_TOKEN for `dlock run`), for every
// kind of lock: a token lock's token, or a handle's own token of a
// reentrant hold, a read lock or a semaphore, which releases that handle
// only. Nothing else releases anything: a reentrant owner id or
// SharedValue is not a token (ForceRelease is the operator's way to steal).
//
// A semaphore's limit is what its callers pass (Client.Semaphore), which
// an admin call does not know: the permits it frees go to the queued
// waiters under a limit stored with Semaphore.SetLimit; without one, it
// hands out nothing and wakes the first queued waiter instead, whose own
// acquire takes what its limit lets in (and passes the rest on). Either
// way no admin release lets a semaphore go above the limit its callers use.
//
// The token is the holder's credential: a release by it counts as the
// holder's own, so the holder's Unlock within the next 10 s returns nil
// (its renewal, if it comes first, reports the lock gone). A legacy lock
// (a decimal timestamp) is released as its protocol's release does it, at
// most once, since its timestamp is not unique to one holder.
//
// It returns nil if it released the hold, an error matching ErrNotHeld
// and ErrExpired if the key is gone, ErrNotHeld and ErrTaken if it is
// held but not by token, ErrWrongType if it is not a lock,
// ErrReservedKey for one of dlock's auxiliary keys.
func (c *Client) ReleaseToken(ctx context.Context, key, token string) error {
	if ctx == nil {
		return ErrNilContext
	}
	if err := validKey(c.opts.Prefix, key); err != nil {
		return err
	}
	if token == "" {
		return ErrEmptyToken
	}
	ks := c.keysFor(key)
	var typ *redis.StatusCmd
	var val *redis.StringCmd
	var holds *redis.IntCmd
	var member *redis.FloatCmd
	_, _ = readPipelined(ctx, c.rdb, func(p redis.Pipeliner) error {
		typ = p.Type(ctx, key)
		val = p.Get(ctx, key)
		member = p.ZScore(ctx, key, token)
		holds = p.Exists(ctx, auxOf(ks, holdsSuffix))
		return nil
	})
	if err := typ.Err(); err != nil {
		return unavailable(err)
	}
	var proto protocol.Protocol
	legacy := false
	switch typ.Val() {
	case "none":
		return errors.Join(ErrNotHeld, ErrExpired)
	case "zset":
		if member.Err() != nil { // not a holder: leave the semaphore alone
			return errors.Join(ErrNotHeld, ErrTaken)
		}
		proto = c.adminSemaphore()
	case "string":
		m := c.queueMode(modeTry)
		switch v := val.Val(); {
		case v == SharedValue:
			proto = sharedLock{holdSet{queueMode: m, group: v, suffix: readersSuffix}}
		case holds.Val() > 0 || isReentrantValue(v):
			// A reentrant hold: v names the owner, which is no credential;
			// only a handle's token in the hold set releases (that handle).
			proto = reentrantLock{holdSet{queueMode: m, group: v, suffix: holdsSuffix}}
		case classify(v) == KindLegacy:
			legacy = true
		default:
			proto = c.tokenLock(modeTry)
		}
	default:
		return ErrWrongType
	}
	var code int64
	var err error
	if legacy {
		code, err = c.releaseLegacy(ctx, ks, token)
	} else {
		code, err = releaseOnce(ctx, c.rdb, proto, ks, token)
	}
	switch {
	case err != nil:
		return unavailable(err)
	case code == codeOK:
		return nil
	case code == codeWrongType:
		return ErrWrongType
	case code == codeGone:
		// The key may still be held, by other handles than token.
		if info, err := c.Inspect(ctx, key); err == nil && info.Held {
			return errors.Join(ErrNotHeld, ErrTaken)
		}
		return errors.Join(ErrNotHeld, ErrExpired)
	default:
		return errors.Join(ErrNotHeld, ErrTaken)
	}
}

func isReentrantValue(v string) bool {
	_, ok := ReentrantOwner(v)
	return ok
}
