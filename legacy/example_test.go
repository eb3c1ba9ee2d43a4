package legacy_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/legacy"
	"github.com/redis/go-redis/v9"
)

// A Go service joins the Python services of seed 004 on their lock key:
// the key holds the expiry time in Unix seconds, as they expect.
func ExampleNew() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	p := legacy.New(legacy.Options{Unit: legacy.Seconds})
	lk, err := c.Lock(ctx, "lock.foo", dlock.WithProtocol(p), dlock.WithTTL(3*time.Second))
	if err != nil {
		fmt.Println("lock:", err)
		return
	}
	// The key holds now + timeout + 1 in Unix seconds, without a Redis TTL.
	expiry, _ := rdb.Get(ctx, "lock.foo").Int64()
	left := expiry - time.Now().Unix()
	fmt.Println("expiry stored:", lk.Token() == fmt.Sprint(expiry) && (left == 4 || left == 3))
	fmt.Println("fence:", lk.Fence()) // the protocol has none

	// Another client of the same key finds it held.
	_, err = c.TryLock(ctx, "lock.foo", dlock.WithProtocol(p), dlock.WithTTL(3*time.Second))
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))

	if err := lk.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err)
	}
	fmt.Println("key exists after Unlock:", rdb.Exists(ctx, "lock.foo").Val())
	// Output:
	// expiry stored: true
	// fence: 0
	// true
	// key exists after Unlock: 0
}
