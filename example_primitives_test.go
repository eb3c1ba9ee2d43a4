package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/redis/go-redis/v9"
)

// exampleClient returns a Client for an Example and its clean-up.
func exampleClient() (*dlock.Client, *redis.Client, func()) {
	return exampleClientWith(dlock.Options{})
}

// exampleClientWith is exampleClient with options.
func exampleClientWith(o dlock.Options) (*dlock.Client, *redis.Client, func()) {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	locks, err := dlock.New(rdb, o)
	if err != nil {
		panic(err)
	}
	return locks, rdb, func() { locks.Close(); rdb.Close() }
}

func ExampleClient_Reentrant() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	// job-42 takes the lock, then (in a helper, or a retried step) again.
	job := locks.Reentrant("example:reentrant")
	outer, _ := job.Lock(ctx, "job-42")
	inner, err := job.Lock(ctx, "job-42")
	fmt.Println(err, outer.Fence() == inner.Fence())

	// Another owner is excluded until every handle of job-42 is unlocked.
	_, err = job.TryLock(ctx, "job-7")
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	inner.Unlock(ctx)
	_, err = job.TryLock(ctx, "job-7")
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	outer.Unlock(ctx)
	other, err := job.TryLock(ctx, "job-7")
	fmt.Println(err)
	other.Unlock(ctx)
	// Output:
	// <nil> true
	// true
	// true
	// <nil>
}

func ExampleReentrant_Lock() {
	locks, _, done := exampleClient()
	defer done()

	// Everything done under ctx is one owner (owner "" means the
	// context's): a nested step locks the key again instead of
	// deadlocking on itself.
	ctx := dlock.ContextWithOwner(context.Background(), "")
	step := func(ctx context.Context) error {
		lk, err := locks.Reentrant("example:owner").Lock(ctx, "")
		if err != nil {
			return err
		}
		defer lk.Unlock(ctx)
		fmt.Println("nested")
		return nil
	}
	outer, err := locks.Reentrant("example:owner").Lock(ctx, "")
	fmt.Println(err)
	fmt.Println(step(ctx))
	outer.Unlock(ctx)
	// Without an owner, given or bound, the call fails before any Redis call.
	_, err = locks.Reentrant("example:owner").Lock(context.Background(), "")
	fmt.Println(errors.Is(err, dlock.ErrInvalidOwner))
	// Output:
	// <nil>
	// nested
	// <nil>
	// true
}

func ExampleReentrant_TryLock() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	r := locks.Reentrant("example:reentrant-try")
	held, _ := r.TryLock(ctx, "job-1")
	again, err := r.TryLock(ctx, "job-1") // the same owner joins its hold
	fmt.Println(err)
	_, err = r.TryLock(ctx, "job-2")
	var na *dlock.NotAcquiredError
	fmt.Println(errors.As(err, &na))
	again.Unlock(ctx)
	held.Unlock(ctx)
	// Output:
	// <nil>
	// true
}

func ExampleContextWithOwner() {
	locks, _, done := exampleClient()
	defer done()

	// A request binds its owner once; every Reentrant call under it with
	// owner "" acts as that owner.
	ctx := dlock.ContextWithOwner(context.Background(), "request-17")
	a, _ := locks.Reentrant("example:ctx-owner").Lock(ctx, "")
	b, err := locks.Reentrant("example:ctx-owner").TryLock(ctx, "request-17")
	fmt.Println(err, a.Fence() == b.Fence())
	b.Unlock(ctx)
	a.Unlock(ctx)
	// Output:
	// <nil> true
}

func ExampleClient_RWLock() {
	ctx := context.Background()
	locks, rdb, done := exampleClient()
	defer done()

	// Readers share the key...
	config := locks.RWLock("example:config")
	r1, _ := config.RLock(ctx)
	r2, err := config.RLock(ctx)
	fmt.Println(err, rdb.Get(ctx, "example:config").Val() == admin.SharedValue)

	// ...and exclude writers: any exclusive lock on the key.
	_, err = locks.TryLock(ctx, "example:config")
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	r1.Unlock(ctx)
	r2.Unlock(ctx)
	w, err := config.TryLock(ctx)
	fmt.Println(err, w.Fence() > r2.Fence())
	w.Unlock(ctx)
	// Output:
	// <nil> true
	// true
	// <nil> true
}

func ExampleRWLock_RLock() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	r, err := locks.RWLock("example:rlock").RLock(ctx, dlock.WithTTL(30*time.Second))
	fmt.Println(err)
	r.Unlock(ctx)
	// Output:
	// <nil>
}

func ExampleRWLock_TryRLock() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	rw := locks.RWLock("example:try-rlock")
	w, _ := rw.Lock(ctx)
	_, err := rw.TryRLock(ctx) // a writer holds the key
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	w.Unlock(ctx)
	r, err := rw.TryRLock(ctx)
	fmt.Println(err)
	r.Unlock(ctx)
	// Output:
	// true
	// <nil>
}

func ExampleRWLock_Lock() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	rw := locks.RWLock("example:wlock")
	w, err := rw.Lock(ctx) // the same lock as locks.Lock(ctx, "example:wlock")
	fmt.Println(err)
	_, err = locks.TryLock(ctx, "example:wlock")
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	w.Unlock(ctx)
	// Output:
	// <nil>
	// true
}

func ExampleRWLock_TryLock() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	rw := locks.RWLock("example:try-wlock")
	r, _ := rw.RLock(ctx)
	_, err := rw.TryLock(ctx) // a reader holds the key
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	r.Unlock(ctx)
	// Output:
	// true
}

func ExampleClient_Semaphore() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	// At most 2 holders of "example:pool" at a time.
	pool := locks.Semaphore("example:pool", 2)
	a, _ := pool.Acquire(ctx, 1)
	b, _ := pool.Acquire(ctx, 1)
	_, err := pool.TryAcquire(ctx, 1)
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	a.Unlock(ctx) // gives a permit back
	c, err := pool.TryAcquire(ctx, 1)
	fmt.Println(err)
	b.Unlock(ctx)
	c.Unlock(ctx)
	// Output:
	// true
	// <nil>
}

func ExampleSemaphore_Acquire() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	// A budget of 10 units; a big job takes 7 at once.
	budget := locks.Semaphore("example:budget", 10)
	big, _ := budget.Acquire(ctx, 7)
	small, err := budget.Acquire(ctx, 3)
	fmt.Println(err)
	// More than the limit can never be granted: refused at once.
	_, err = budget.Acquire(ctx, 11)
	fmt.Println(errors.Is(err, dlock.ErrInvalidPermits))
	big.Unlock(ctx)
	small.Unlock(ctx)
	// Output:
	// <nil>
	// true
}

func ExampleSemaphore_TryAcquire() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	budget := locks.Semaphore("example:try-budget", 10)
	big, _ := budget.TryAcquire(ctx, 7)
	_, err := budget.TryAcquire(ctx, 4)
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	small, err := budget.TryAcquire(ctx, 3)
	fmt.Println(err)
	big.Unlock(ctx)
	small.Unlock(ctx)
	// Output:
	// true
	// <nil>
}

func ExampleSemaphore_SetLimit() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	workers := locks.Semaphore("example:workers", 1)
	a, _ := workers.Acquire(ctx, 1)
	_, err := workers.TryAcquire(ctx, 1)
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))

	// Raise the limit for every client, at run time.
	fmt.Println(workers.SetLimit(ctx, 2))
	b, err := workers.TryAcquire(ctx, 1)
	fmt.Println(err)
	a.Unlock(ctx)
	b.Unlock(ctx)
	fmt.Println(workers.SetLimit(ctx, 0)) // back to each client's own limit
	// Output:
	// true
	// <nil>
	// <nil>
	// <nil>
}

func ExampleClient_LockMulti() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	// Move money between two accounts: hold both, in any order given.
	lk, err := locks.LockMulti(ctx, []string{"example:acct:{b}", "example:acct:{a}"})
	if err != nil {
		panic(err)
	}
	fmt.Println(lk.Keys())
	lk.Unlock(ctx)
	// Output:
	// [example:acct:{a} example:acct:{b}]
}

func ExampleClient_TryLockMulti() {
	ctx := context.Background()
	locks, rdb, done := exampleClient()
	defer done()

	held, _ := locks.Lock(ctx, "example:multi:b")
	_, err := locks.TryLockMulti(ctx, []string{"example:multi:a", "example:multi:b"})
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	fmt.Println(rdb.Exists(ctx, "example:multi:a").Val()) // all or nothing
	held.Unlock(ctx)
	// Output:
	// true
	// 0
}

func ExampleClient_DoMulti() {
	locks, _, done := exampleClient()
	defer done()

	err := locks.DoMulti(context.Background(), []string{"example:do:a", "example:do:b"}, func(ctx context.Context) error {
		// Both held; ctx is cancelled if either is lost.
		return nil
	})
	fmt.Println(err)
	// Output:
	// <nil>
}

func ExampleLock_Keys() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	one, _ := locks.Lock(ctx, "example:keys")
	fmt.Println(one.Keys())
	one.Unlock(ctx)
	// Output:
	// [example:keys]
}

func ExampleLock_FenceOf() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	lk, _ := locks.LockMulti(ctx, []string{"example:fence:{x}1", "example:fence:{x}2"})
	defer lk.Unlock(ctx)
	// Each protected resource checks the fence of its own key.
	fmt.Println(lk.FenceOf("example:fence:{x}1") > 0, lk.FenceOf("example:fence:{x}2") > 0, lk.FenceOf("other"))
	// Output:
	// true true 0
}

func ExampleClient_Counter() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	// A flash sale: 100 items split over 8 segments, each with its own lock.
	stock := locks.Counter("example:flash-sale", 8)
	stock.Set(ctx, 100)
	sold := 0
	for {
		_, err := stock.Take(ctx, 1, nil)
		if errors.Is(err, dlock.ErrExhausted) {
			break
		}
		sold++
	}
	fmt.Println(sold)
	// Output:
	// 100
}

func ExampleCounter_Set() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	stock := locks.Counter("example:counter-set", 4)
	fmt.Println(stock.Set(ctx, 10)) // 3, 3, 2, 2
	total, _ := stock.Total(ctx)
	fmt.Println(total)
	// Output:
	// <nil>
	// 10
}

func ExampleCounter_Take() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	stock := locks.Counter("example:counter-take", 2)
	stock.Set(ctx, 2)
	// Take one, and create the order under the segment's lock; if that
	// fails, the unit goes back.
	_, err := stock.Take(ctx, 1, func(ctx context.Context, segment int) error {
		return errors.New("payment declined")
	})
	fmt.Println(err)
	_, err = stock.Take(ctx, 1, func(ctx context.Context, segment int) error { return nil })
	fmt.Println(err)
	total, _ := stock.Total(ctx)
	fmt.Println(total)
	// Output:
	// payment declined
	// <nil>
	// 1
}

func ExampleCounter_Total() {
	ctx := context.Background()
	locks, _, done := exampleClient()
	defer done()

	stock := locks.Counter("example:counter-total", 3)
	stock.Set(ctx, 7)
	stock.Take(ctx, 2, nil)
	total, _ := stock.Total(ctx)
	fmt.Println(total)
	// Output:
	// 5
}
