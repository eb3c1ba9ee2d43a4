package admin_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/redis/go-redis/v9"
)

func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{Prefix: "jobs"})
	defer locks.Close()

	// The admin Client of the locks locks takes: the same Redis, prefix
	// and pickup timeout.
	o := locks.Options()
	adm, err := admin.New(rdb, admin.Options{Prefix: o.Prefix, PickupTimeout: o.PickupTimeout})
	fmt.Println(err, adm.Options().Prefix)
	// Output:
	// <nil> jobs
}

func ExampleClient_AuxKeyOf() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	adm, _ := admin.New(rdb, admin.Options{})
	fmt.Println(adm.AuxKeyOf("dlock:{orders:1}:fence"))
	fmt.Println(adm.AuxKeyOf("orders:1"))
	// Output:
	// orders:1 fence true
	//   false
}

func ExampleClient_Inspect() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{})
	defer locks.Close()
	adm, _ := admin.New(rdb, admin.Options{})

	lock, _ := locks.Lock(ctx, "example:inspect", dlock.WithTTL(time.Minute))
	defer lock.Unlock(ctx)
	info, _ := adm.Inspect(ctx, "example:inspect")
	fmt.Println(info.Held, info.Kind, info.Value == lock.Token(), info.Fence == lock.Fence())
	// Output:
	// true token true true
}

func ExampleClient_List() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{Prefix: "listexample"})
	defer locks.Close()
	adm, _ := admin.New(rdb, admin.Options{Prefix: "listexample"})

	a, _ := locks.Lock(ctx, "jobs:a")
	defer a.Unlock(ctx)
	b, _ := locks.Lock(ctx, "jobs:b")
	defer b.Unlock(ctx)
	n := 0
	_ = adm.List(ctx, "jobs:*", func(info admin.Info) bool {
		n++
		return true
	})
	fmt.Println(n)
	// Output:
	// 2
}

func ExampleClient_ForceRelease() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{})
	defer locks.Close()
	adm, _ := admin.New(rdb, admin.Options{})

	rdb.Set(ctx, "example:stuck", "a crashed holder's token", 0) // no TTL: stuck forever
	deleted, err := adm.ForceRelease(ctx, "example:stuck")
	fmt.Println(deleted, err)
	// Output:
	// true <nil>
}

func ExampleClient_ReleaseToken() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{})
	defer locks.Close()
	adm, _ := admin.New(rdb, admin.Options{})

	lock, _ := locks.Lock(ctx, "example:token", dlock.WithoutRenewal())
	// Another process that only knows the token (e.g. from DLOCK_TOKEN):
	fmt.Println(adm.ReleaseToken(ctx, "example:token", "not-the-token"))
	fmt.Println(adm.ReleaseToken(ctx, "example:token", lock.Token()))
	// Output:
	// dlock: lock not held: lock taken by another owner
	// <nil>
}

func ExampleSlot() {
	fmt.Println(admin.Slot("user:{42}:lock") == admin.Slot("42"), admin.Slot("foo"))
	// Output:
	// true 12182
}

func ExampleClient_KeysFor() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	adm, _ := admin.New(rdb, admin.Options{})
	k := adm.KeysFor("orders:1")
	fmt.Println(k.Lock, k.Fence, k.Queue, k.Wake)
	// Output:
	// orders:1 dlock:{orders:1}:fence dlock:{orders:1}:q dlock:{orders:1}:wake
}
