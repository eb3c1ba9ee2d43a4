package fenced

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// SetSeq is Set with the write's sequence given: the same command sent
// twice, or two writes in a chosen order.
func SetSeq(ctx context.Context, rdb redis.Scripter, key string, fence uint64, owner, value string, seq uint64) error {
	return run(ctx, rdb, key, fence, owner, "set", value, seq)
}
