package redlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// A lock over three independent Redis masters: held while a majority of
// them hold it, renewed by the Client's watchdog, fenced.
func Example() {
	ctx := context.Background()
	var nodes []redis.UniversalClient
	for _, addr := range sharedAddrs { // three masters, no replication between them
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}
	// NodeTimeout: how long a node may take to answer (the default, a
	// tenth of the TTL up to 50ms, suits a quiet network; its time comes
	// out of the lock's validity).
	c, p, err := redlock.NewClient(nodes, redlock.Options{NodeTimeout: 500 * time.Millisecond}, dlock.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	lk, err := c.Lock(ctx, "example:nightly-report", dlock.WithProtocol(p), dlock.WithTTL(5*time.Second))
	if err != nil {
		fmt.Println(err) // errors.Is(err, redlock.ErrNoQuorum): a majority is down
		return
	}
	fmt.Printf("held on a majority (%d of %d nodes)\n", p.Quorum(), p.Nodes())
	fmt.Println("fenced:", lk.Fence() > 0) // pass lk.Fence() to the resource

	// A second attempt is refused while the lock is held.
	_, err = c.TryLock(ctx, "example:nightly-report", dlock.WithProtocol(p))
	fmt.Println(err != nil)

	if err := lk.Unlock(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// held on a majority (2 of 3 nodes)
	// fenced: true
	// true
}
