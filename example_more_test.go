package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/legacy"
)

func ExampleWithTTL() {
	ctx := context.Background()
	locks, rdb, done := exampleClient()
	defer done()

	lock, _ := locks.Lock(ctx, "example:ttl", dlock.WithTTL(30*time.Second))
	defer lock.Unlock(ctx)
	ttl := rdb.PTTL(ctx, "example:ttl").Val()
	fmt.Println(ttl > 25*time.Second && ttl <= 30*time.Second)
	// Output:
	// true
}

func ExampleWithoutRenewal() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	// Not renewed: it is gone TTL after it was taken unless Extend is called.
	lock, _ := locks.Lock(ctx, "example:norenew", dlock.WithTTL(100*time.Millisecond), dlock.WithoutRenewal())
	<-lock.Done()
	fmt.Println(errors.Is(lock.Err(), dlock.ErrExpired))
	// Output:
	// true
}

func ExampleWithProtocol() {
	ctx := context.Background()
	locks, rdb, done := exampleClient()
	defer done()

	// The seeds' SETNX/GETSET lock, to share a key with old C# or Python code.
	seeds := legacy.New(legacy.Options{Unit: legacy.Seconds})
	lock, err := locks.Lock(ctx, "example:legacy", dlock.WithProtocol(seeds), dlock.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	v := rdb.Get(ctx, "example:legacy").Val()
	fmt.Println(len(v), v == lock.Token()) // a 10-digit Unix timestamp
	lock.Unlock(ctx)
	// Output:
	// 10 true
}

func ExampleClient_Stats() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	lock, _ := locks.Lock(ctx, "example:stats")
	lock.Unlock(ctx)
	s := locks.Stats()
	fmt.Println(s.Acquired, s.Released, s.Held)
	// Output:
	// 1 1 0
}

func ExampleClient_KeysFor() {
	locks, _, done := exampleClient()
	defer done()
	k := locks.KeysFor("orders:1")
	fmt.Println(k.Lock, k.Fence, k.Queue, k.Wake)
	// Output:
	// orders:1 dlock:{orders:1}:fence dlock:{orders:1}:q dlock:{orders:1}:wake
}

func ExampleClient_Close() {
	ctx := context.Background()
	locks, rdb, done := exampleClient()
	defer done()

	locks.Lock(ctx, "example:close")
	locks.Close() // releases what the Client still holds
	fmt.Println(rdb.Exists(ctx, "example:close").Val())
	_, err := locks.Lock(ctx, "example:close")
	fmt.Println(errors.Is(err, dlock.ErrClosed))
	// Output:
	// 0
	// true
}

func ExampleLastFence() {
	ctx := context.Background()
	locks, rdb, done := exampleClient()
	defer done()

	lock, _ := locks.Lock(ctx, "example:lastfence")
	defer lock.Unlock(ctx)
	_ = dlock.FencedSet(ctx, rdb, "example:report", lock.Fence(), lock.Token(), "v1")
	last, _ := dlock.LastFence(ctx, rdb, "example:report")
	fmt.Println(last == lock.Fence(), dlock.GuardKey("example:report"))
	rdb.Del(ctx, "example:report", dlock.GuardKey("example:report"))
	// Output:
	// true dlock:{example:report}:guard
}

func ExampleFencedDelete() {
	ctx := context.Background()
	locks, rdb, done := exampleClient()
	defer done()

	old, _ := locks.Lock(ctx, "example:fdel")
	old.Unlock(ctx)
	lock, _ := locks.Lock(ctx, "example:fdel")
	defer lock.Unlock(ctx)
	_ = dlock.FencedSet(ctx, rdb, "example:fdel-res", lock.Fence(), lock.Token(), "v")
	// The earlier holder, come back late, cannot delete it.
	err := dlock.FencedDelete(ctx, rdb, "example:fdel-res", old.Fence(), old.Token())
	fmt.Println(errors.Is(err, dlock.ErrStaleFence), rdb.Exists(ctx, "example:fdel-res").Val())
	fmt.Println(dlock.FencedDelete(ctx, rdb, "example:fdel-res", lock.Fence(), lock.Token()))
	rdb.Del(ctx, dlock.GuardKey("example:fdel-res"))
	// Output:
	// true 1
	// <nil>
}

func ExampleChainHooks() {
	ctx := context.Background()
	var mine, theirs int
	h := dlock.ChainHooks(
		dlock.Hooks{Acquire: func(dlock.AcquireInfo) { mine++ }},
		dlock.Hooks{Acquire: func(dlock.AcquireInfo) { theirs++ }},
	)
	locks, _, done := exampleClientWith(dlock.Options{Hooks: h})
	defer done()
	lock, _ := locks.Lock(ctx, "example:chain")
	lock.Unlock(ctx)
	fmt.Println(mine, theirs)
	// Output:
	// 1 1
}
