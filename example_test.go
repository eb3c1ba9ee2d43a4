package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fenced"
	"github.com/redis/go-redis/v9"
)

func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()

	locks, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	// Wait for the lock, work, release. The watchdog renews it meanwhile.
	lock, err := locks.Lock(ctx, "example:nightly-report")
	if err != nil {
		panic(err)
	}
	fmt.Println("held:", lock.Err() == nil, "fence > 0:", lock.Fence() > 0)
	if err := lock.Unlock(ctx); err != nil {
		panic(err)
	}
	fmt.Println("released:", errors.Is(lock.Err(), dlock.ErrReleased))
	// Output:
	// held: true fence > 0: true
	// released: true
}

func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, err := dlock.New(rdb, dlock.Options{
		Prefix: "myapp",          // auxiliary keys: myapp:{key}:fence, myapp:{key}:wake
		TTL:    30 * time.Second, // renewed every 10s while held
	})
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	fmt.Println(locks.Options().TTL, locks.Options().RetryInterval)

	_, err = dlock.New(nil, dlock.Options{})
	fmt.Println(errors.Is(err, dlock.ErrInvalidArgument))
	// Output:
	// 30s 1s
	// true
}

func ExampleClient_TryLock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	a, _ := dlock.New(rdb, dlock.Options{})
	defer a.Close()
	b, _ := dlock.New(rdb, dlock.Options{})
	defer b.Close()

	held, _ := a.TryLock(ctx, "example:trylock", dlock.WithTTL(time.Minute))
	defer held.Unlock(ctx)

	_, err := b.TryLock(ctx, "example:trylock")
	var busy *dlock.NotAcquiredError
	if errors.As(err, &busy) {
		fmt.Println("busy for about a minute:", busy.TTL > 55*time.Second)
	}
	// Output:
	// busy for about a minute: true
}

func ExampleClient_Lock_timeout() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{})
	defer locks.Close()

	first, _ := locks.Lock(context.Background(), "example:timeout")
	defer first.Unlock(context.Background())

	// Bound the wait with the context.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := locks.Lock(ctx, "example:timeout")
	fmt.Println(errors.Is(err, dlock.ErrContextDone), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// true true
}

func ExampleClient_Do() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{})
	defer locks.Close()

	err := locks.Do(context.Background(), "example:do", func(ctx context.Context) error {
		// ctx is cancelled, with context.Cause = the loss error, if the lock
		// is lost; stop writing then.
		return rdb.Incr(ctx, "example:counter").Err()
	})
	fmt.Println(err)
	// Output:
	// <nil>
}

// ExampleLockFrom makes a fenced write from inside Do: the function's
// context carries the lock, whose fence and token the resource checks, so
// a holder paused past its lease is refused (fenced.ErrStale) instead of
// overwriting a later holder's write.
func ExampleLockFrom() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{})
	defer locks.Close()

	err := locks.Do(ctx, "example:invoice-lock", func(ctx context.Context) error {
		lock, _ := dlock.LockFrom(ctx)
		return fenced.Set(ctx, rdb, "example:invoice", lock.Fence(), lock.Token(), "sent")
	})
	fmt.Println(err, rdb.Get(ctx, "example:invoice").Val())
	// Output:
	// <nil> sent
}

func ExampleLock_Done() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{})
	defer locks.Close()

	lock, _ := locks.Lock(ctx, "example:done", dlock.WithTTL(300*time.Millisecond))
	rdb.Set(ctx, "example:done", "an operator's value", 0) // someone takes the key

	<-lock.Done() // the watchdog finds out at its next renewal
	fmt.Println(errors.Is(lock.Err(), dlock.ErrLost), errors.Is(lock.Err(), dlock.ErrTaken))
	rdb.Del(ctx, "example:done")
	// Output:
	// true true
}

func ExampleLock_Extend() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{})
	defer locks.Close()

	lock, _ := locks.Lock(ctx, "example:extend", dlock.WithTTL(time.Second), dlock.WithoutRenewal())
	before := lock.Deadline()
	if err := lock.Extend(ctx, time.Minute); err != nil {
		panic(err)
	}
	fmt.Println(lock.Deadline().Sub(before) > 50*time.Second)
	lock.Unlock(ctx)
	// Output:
	// true
}

func ExampleLock_Fence() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, _ := dlock.New(rdb, dlock.Options{})
	defer locks.Close()

	first, _ := locks.Lock(ctx, "example:fence")
	first.Unlock(ctx)
	second, _ := locks.Lock(ctx, "example:fence")
	defer second.Unlock(ctx)
	// A resource that remembers the highest fence it has seen rejects the
	// first holder if it comes back late.
	fmt.Println(second.Fence() > first.Fence())
	// Output:
	// true
}

// Example_readme is the library example of README.md: TestReadmeExamples
// fails if the two differ (between the README markers, whitespace aside).
func Example_readme() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()

	// README begin
	locks, err := dlock.New(rdb, dlock.Options{}) // rdb: your go-redis v9 client
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close() // stops the watchdog, releases what is still held

	// Run a function under the lock. Its ctx is cancelled, with the cause, if the lock is lost.
	err = locks.Do(ctx, "nightly-report", func(ctx context.Context) error {
		lock, _ := dlock.LockFrom(ctx) // the lock Do holds
		// A fenced write: refused (fenced.ErrStale) once a later holder has written.
		return fenced.Set(ctx, rdb, "report:status", lock.Fence(), lock.Token(), "built")
	})
	if err != nil {
		log.Fatal(err)
	}

	// Or hold it by hand. Lock waits in FIFO order; TryLock makes one attempt.
	lock, err := locks.Lock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(ctx) // idempotent; reports ErrLost if the lock was lost
	if err := lock.Err(); err != nil {
		log.Fatal(err) // lost: Done() is closed, Err says why
	}
	fmt.Println("fence for the resource:", lock.Fence() > 0) // refuse writes with older fences
	// README end

	// Output:
	// fence for the resource: true
}
