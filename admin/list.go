// list.go owns List: the locks under the Client's prefix, found by SCAN
// on every node, matched by a glob and inspected.

package admin

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/redis/go-redis/v9"
)

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
		return dlock.ErrNilContext
	}
	match, err := globRE(pattern)
	if err != nil {
		return fmt.Errorf("%w: pattern %q: %w", dlock.ErrInvalidArgument, pattern, err)
	}
	var mu sync.Mutex // guards seen and stop, and serialises fn
	seen := map[string]bool{}
	stop := false
	visit := func(key string, showFree bool) error {
		mu.Lock()
		defer mu.Unlock()
		if stop || seen[key] || c.validKey(key) != nil {
			return nil
		}
		info, err := c.Inspect(ctx, key)
		if errors.Is(err, dlock.ErrInvalidArgument) {
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
			keys, next, err := node.Scan(ctx, cursor, keyspace.GlobEscape(c.prefix)+":*"+keyspace.FenceSuffix, 1000).Result()
			if err != nil {
				return unavailable(err)
			}
			for _, name := range keys {
				if k, ok := keyspace.KeyOfAux(c.prefix, keyspace.FenceSuffix, name); ok && match.MatchString(k) {
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
		for _, suffix := range []string{keyspace.LimitSuffix, keyspace.LimitVerSuffix, keyspace.CountSuffix, keyspace.SegmentsSuffix, keyspace.GuardSuffix} {
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
