package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/legacy"
	"github.com/dlock-go/dlock/outcome"
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

	// The SETNX/GETSET timestamp lock of older C# and Python code, to share
	// a key with it.
	timestamps := legacy.New(legacy.Options{Unit: legacy.Seconds})
	lock, err := locks.Lock(ctx, "example:legacy", dlock.WithProtocol(timestamps), dlock.WithTTL(10*time.Second))
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

func ExampleClient_AddHooks() {
	ctx := context.Background()
	locks, _, done := exampleClientWith(dlock.Options{
		Hooks: dlock.Hooks{Acquire: func(context.Context, dlock.AcquireInfo) { fmt.Println("first") }},
	})
	defer done()
	// Later, for example from a metrics or tracing adapter: runs after the
	// hooks given to New, with the ctx of the call that caused the event.
	type requestID struct{}
	locks.AddHooks(dlock.Hooks{
		Acquire: func(ctx context.Context, i dlock.AcquireInfo) {
			fmt.Println("second:", ctx.Value(requestID{}), outcome.Of(i.Err))
		},
	})
	lock, _ := locks.Lock(context.WithValue(ctx, requestID{}, "req-42"), "example:addhooks")
	lock.Unlock(ctx)
	// Output:
	// first
	// second: req-42 ok
}
