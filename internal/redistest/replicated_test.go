package redistest_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// setReplicated sets key to value on c's server and sends WAIT on the same
// connection (one pipeline), and fails t unless at least replicas
// acknowledged it. A WAIT alone covers only its own connection's writes: on
// a connection that wrote nothing it answers at once with every connected
// replica, whatever they have received.
func setReplicated(ctx context.Context, t *testing.T, c redis.UniversalClient, key, value string, replicas int) {
	t.Helper()
	var wait *redis.IntCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, value, 0)
		wait = redis.NewIntCmd(ctx, "wait", replicas, 5000)
		_ = p.Process(ctx, wait)
		return nil
	})
	if n, werr := wait.Result(); err != nil || werr != nil || n < int64(replicas) {
		t.Fatalf("SET %s and WAIT %d: %d replicas acknowledged (%v, %v)", key, replicas, n, err, werr)
	}
}
