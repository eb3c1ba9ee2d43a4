package stripe_test

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/stripe"
	"github.com/redis/go-redis/v9"
)

func ExampleNew() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{})
	defer locks.Close()

	// One lock per SKU, but never more than 64 lock keys.
	stripes := stripe.New("example:sku-locks", 64)
	lk, err := locks.Lock(ctx, stripes.Key("sku:1234"))
	fmt.Println(err, lk.Key())
	lk.Unlock(ctx)
	// Output:
	// <nil> example:sku-locks:12
}

func ExampleSet_Key() {
	s := stripe.New("inv", 8)
	fmt.Println(s.Key("sku:1"), s.Key("sku:2"))
	// Keys with the same hash tag share a stripe.
	fmt.Println(s.Key("user:{42}:cart") == s.Key("user:{42}:orders"))
	// Output:
	// inv:3 inv:6
	// true
}

func ExampleSet_Keys() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{})
	defer locks.Close()

	s := stripe.New("example:inv", 8)
	// Lock every item of an order at once, without deadlock. sku:1 and
	// sku:9 share stripe 3, which is locked once.
	lk, err := locks.LockMulti(ctx, s.Keys("sku:1", "sku:2", "sku:9"))
	fmt.Println(err, lk.Keys())
	lk.Unlock(ctx)
	// Output:
	// <nil> [example:inv:3 example:inv:6]
}

func ExampleSet_Index() {
	s := stripe.New("inv", 8)
	fmt.Println(s.Index("sku:1"), s.Len())
	// Output:
	// 3 8
}

func ExampleSet_Stripe() {
	s := stripe.New("inv", 4)
	for i := range s.Len() {
		fmt.Print(s.Stripe(i), " ")
	}
	fmt.Println()
	// Output:
	// inv:0 inv:1 inv:2 inv:3
}

func ExampleSet_Len() {
	var zero stripe.Set
	s := stripe.New("inv", 16)
	fmt.Println(s.Len(), zero.Len())
	// Output:
	// 16 1
}
