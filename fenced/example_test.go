package fenced_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fenced"
	"github.com/redis/go-redis/v9"
)

// ExampleSet shows a holder that paused past its lease being refused
// by the resource. The resource checks the fence and records it in the
// same step; with SQL the same check is one statement:
//
//	UPDATE reports SET body = $3, fence = $1 WHERE id = $2 AND fence < $1
//
// and zero rows updated means the writer is stale.
func ExampleSet() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{})
	defer locks.Close()

	// The old holder's lease runs out while it is paused (no renewal here,
	// to make the pause easy to show).
	old, _ := locks.Lock(ctx, "example:report-lock", dlock.WithTTL(50*time.Millisecond), dlock.WithoutRenewal())
	time.Sleep(100 * time.Millisecond)

	// The new holder writes with its fence.
	cur, _ := locks.Lock(ctx, "example:report-lock")
	defer cur.Unlock(ctx)
	err := fenced.Set(ctx, rdb, "example:report", cur.Fence(), cur.Token(), "written by the current holder")
	fmt.Println("current holder:", err)

	// The old holder wakes up and writes: refused.
	err = fenced.Set(ctx, rdb, "example:report", old.Fence(), old.Token(), "stale write")
	fmt.Println("old holder stale:", errors.Is(err, fenced.ErrStale))
	fmt.Println(rdb.Get(ctx, "example:report").Val())
	// Output:
	// current holder: <nil>
	// old holder stale: true
	// written by the current holder
}

func ExampleLast() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{})
	defer locks.Close()

	lock, _ := locks.Lock(ctx, "example:lastfence")
	defer lock.Unlock(ctx)
	_ = fenced.Set(ctx, rdb, "example:report", lock.Fence(), lock.Token(), "v1")
	last, _ := fenced.Last(ctx, rdb, "example:report")
	fmt.Println(last == lock.Fence(), fenced.GuardKey("example:report"))
	rdb.Del(ctx, "example:report", fenced.GuardKey("example:report"))
	// Output:
	// true dlock:{example:report}:guard
}

func ExampleDelete() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{})
	defer locks.Close()

	old, _ := locks.Lock(ctx, "example:fdel")
	old.Unlock(ctx)
	lock, _ := locks.Lock(ctx, "example:fdel")
	defer lock.Unlock(ctx)
	_ = fenced.Set(ctx, rdb, "example:fdel-res", lock.Fence(), lock.Token(), "v")
	// The earlier holder, come back late, cannot delete it.
	err := fenced.Delete(ctx, rdb, "example:fdel-res", old.Fence(), old.Token())
	fmt.Println(errors.Is(err, fenced.ErrStale), rdb.Exists(ctx, "example:fdel-res").Val())
	fmt.Println(fenced.Delete(ctx, rdb, "example:fdel-res", lock.Fence(), lock.Token()))
	rdb.Del(ctx, fenced.GuardKey("example:fdel-res"))
	// Output:
	// true 1
	// <nil>
}

func ExampleGuardKey() {
	// The guard record lives beside the resource, in its Cluster slot.
	fmt.Println(fenced.GuardKey("orders:1"))
	fmt.Println(fenced.GuardKey("user:{42}:profile"))
	// Output:
	// dlock:{orders:1}:guard
	// dlock:#user:{42}:profile:guard
}
