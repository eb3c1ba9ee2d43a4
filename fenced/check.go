package fenced

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/evictpolicy"
	"github.com/redis/go-redis/v9"
)

// CheckServer reads the maxmemory-policy of every master of rdb and
// returns a *dlock.EvictionError (matching dlock.ErrEvictionPolicy) if one
// may evict keys: a guard record has no TTL, but any policy other than
// noeviction may still evict it under memory pressure, and the next write
// with any fence, an older one too, is then accepted. Set, Delete and Last
// do not check: call it at start-up with the client they use. A master
// that does not answer makes it return dlock.ErrUnavailable; a policy a
// server refuses to tell (CONFIG GET and INFO both denied) is not an
// error.
func CheckServer(ctx context.Context, rdb redis.UniversalClient) error {
	if ctx == nil {
		return dlock.ErrNilContext
	}
	if isNil(rdb) {
		return dlock.ErrNilClient
	}
	nodes := evictpolicy.ReadAll(ctx, rdb)
	if ev := evictpolicy.Evicting(nodes); len(ev) > 0 {
		return &dlock.EvictionError{Servers: ev}
	}
	if err := evictpolicy.Unreached(nodes); err != nil {
		return fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
	}
	return nil
}
