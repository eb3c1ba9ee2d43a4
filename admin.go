package dlock

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Kind names what a lock key's value looks like, as Inspect sees it.
type Kind string

const (
	KindFree      Kind = ""          // the key does not exist
	KindToken     Kind = "token"     // a dlock token (22 base64url characters)
	KindLegacy    Kind = "legacy"    // a decimal Unix timestamp: the seeds' SETNX/GETSET lock
	KindForeign   Kind = "foreign"   // another string: some other SET NX client's token
	KindShared    Kind = "shared"    // read-locked (dlock.Shared): the key holds SharedValue
	KindSemaphore Kind = "semaphore" // a dlock semaphore (a sorted set of permit holders)
	KindWrongType Kind = "wrongtype" // any other type: not a lock at all
)

// Info is what Inspect and List report about one lock key.
type Info struct {
	Key   string
	Held  bool   // the key exists and is a string
	Kind  Kind   // what its value looks like
	Value string // the stored value (holder's token or timestamp); "" if free
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
	// and Limit its run-time limit (0: none set by SetLimit).
	Holders, Permits, Limit int64
	// Subscribers counts connections subscribed to the key's wake-up channel
	// (PUBSUB NUMSUB on the node answering): clients with a Barging or
	// non-queueing Lock call waiting.
	Subscribers int64
}

// Inspect reports the state of key without changing it.
func (c *Client) Inspect(ctx context.Context, key string) (Info, error) {
	if ctx == nil {
		return Info{}, ErrNilContext
	}
	if err := validKey(c.opts.Prefix, key); err != nil {
		return Info{}, err
	}
	ks := c.keysFor(key)
	info := Info{Key: key}
	var typ *redis.StatusCmd
	var val *redis.StringCmd
	var pttl *redis.DurationCmd
	var fence *redis.StringCmd
	var subs *redis.MapStringIntCmd
	var queued, holders, readers *redis.IntCmd
	var used, limit *redis.StringCmd
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		typ = p.Type(ctx, key)
		val = p.Get(ctx, key)
		pttl = p.PTTL(ctx, key)
		fence = p.Get(ctx, ks.Fence)
		subs = p.PubSubNumSub(ctx, ks.Wake)
		queued = p.LLen(ctx, ks.Queue)
		holders = p.ZCard(ctx, key) // a semaphore (errors on any other type: ignored)
		readers = p.ZCard(ctx, auxOf(ks, readersSuffix))
		used = p.HGet(ctx, auxOf(ks, permitsSuffix), "#used")
		limit = p.Get(ctx, auxOf(ks, limitSuffix))
		return nil
	})
	if typ.Err() != nil {
		return info, unavailable(typ.Err())
	}
	_ = err // per-command errors are read below
	if f, err := fence.Uint64(); err == nil {
		info.Fence = f
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
	if info.Value == SharedValue {
		info.Kind, info.Holders = KindShared, readers.Val()
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
//   - if pattern is not empty, also every string key matching pattern
//     (SCAN MATCH pattern), so locks of other clients and of the legacy
//     protocol show too; dlock's own auxiliary keys are skipped.
//
// Free keys are skipped. On a Cluster every master is scanned, on a Ring
// every shard. Never KEYS. Pattern is Redis glob syntax.
func (c *Client) List(ctx context.Context, pattern string, fn func(Info) bool) error {
	if ctx == nil {
		return ErrNilContext
	}
	match, err := globRE(pattern)
	if err != nil {
		return errors.Join(ErrInvalidArgument, err)
	}
	var mu sync.Mutex // guards seen and stop, and serialises fn
	seen := map[string]bool{}
	stop := false
	visit := func(key string) error {
		mu.Lock()
		defer mu.Unlock()
		if stop || seen[key] || validKey(c.opts.Prefix, key) != nil {
			return nil
		}
		seen[key] = true
		info, err := c.Inspect(ctx, key)
		if err != nil {
			return err
		}
		if info.Held && !fn(info) {
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
					if err := visit(k); err != nil {
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
			keys, next, err := node.ScanType(ctx, cursor, pattern, 1000, "string").Result()
			if err != nil {
				return unavailable(err)
			}
			for _, k := range keys {
				if c.isAux(k) {
					continue
				}
				if err := visit(k); err != nil {
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

// isAux reports whether name is one of this Client's auxiliary keys.
func (c *Client) isAux(name string) bool {
	for _, suffix := range []string{fenceSuffix, queueSuffix} {
		if _, ok := keyOfAux(c.opts.Prefix, suffix, name); ok {
			return true
		}
	}
	// A waiter lease: "<queue key>:<token>".
	if i := strings.LastIndexByte(name, ':'); i > 0 {
		if _, ok := keyOfAux(c.opts.Prefix, queueSuffix, name[:i]); ok {
			return true
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

// ForceRelease releases key whoever holds it, handing it to the first
// queued waiter (or waking the others): an operator's steal. The holder
// finds out at its next renewal (ErrExpired or ErrTaken).
// It reports whether a lock was deleted. A key that is not a string is
// left alone (ErrWrongType).
func (c *Client) ForceRelease(ctx context.Context, key string) (bool, error) {
	if ctx == nil {
		return false, ErrNilContext
	}
	if err := validKey(c.opts.Prefix, key); err != nil {
		return false, err
	}
	ks := c.keysFor(key)
	code, err := Call{releaseScript, []string{ks.Lock, ks.Queue},
		[]any{"", ks.Wake, c.opts.PickupTimeout.Milliseconds(), "force"}}.Run(ctx, c.rdb).Int64()
	switch {
	case err != nil:
		return false, unavailable(err)
	case code == codeWrongType:
		return false, ErrWrongType
	}
	return code == codeOK, nil
}

// ReleaseToken releases key if it holds token, as its holder's Unlock
// would: for a process that lost its *Lock (crashed and restarted, or
// another program, like `dlock release --token`). It returns nil if it
// deleted the lock, an error matching ErrNotHeld and ErrExpired if the key
// is gone, ErrNotHeld and ErrTaken if another token holds it.
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
	code, err := releaseOnce(ctx, c.rdb, c.tokenLock("try"), c.keysFor(key), token)
	switch {
	case err != nil:
		return unavailable(err)
	case code == codeOK:
		return nil
	case code == codeWrongType:
		return ErrWrongType
	case code == codeGone:
		return errors.Join(ErrNotHeld, ErrExpired)
	default:
		return errors.Join(ErrNotHeld, ErrTaken)
	}
}
