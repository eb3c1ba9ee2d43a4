// Package dlock provides distributed locks on Redis for Go: correct under
// the faults it is tested against, fair, fenced, and honest about what no
// Redis lock can guarantee.
//
// A Client wraps the go-redis v9 client an application already has (plain,
// Sentinel failover, Cluster or Ring). Lock waits for a key (queued in FIFO
// order, the lock handed straight to the next waiter), TryLock makes one
// attempt, and Do runs a function under a lock with a context that is
// cancelled if the lock is lost:
//
//	c, err := dlock.New(rdb, dlock.Options{})
//	...
//	err = c.Do(ctx, "nightly-report", func(ctx context.Context) error {
//		return build(ctx) // ctx is cancelled, with the cause, if the lock is lost
//	})
//
// Every lock is a *Lock: a watchdog renews it while held, Done and Err
// signal its loss with the cause, Deadline says how long it is surely
// valid, and Fence is a fencing token that increases with every grant of
// the key, to give to the resource the lock protects. Inside Do,
// [LockFrom] returns the lock from the function's context; Election.Run
// passes its leader callback the [Leadership], whose Term is the fence.
//
// # Kinds of lock
//
//   - Exclusive: [Client.Lock], [Client.TryLock], [Client.Do].
//   - Read-write: [Client.RWLock], then RLock or Lock.
//   - Semaphore of n permits: [Client.Semaphore], then Acquire; SetLimit
//     changes the limit for every client.
//   - Reentrant for an explicit owner: [Client.Reentrant], then Lock(ctx,
//     owner); [ContextWithOwner] binds an owner to a context.
//   - Several keys at once, deadlock-free: [Client.LockMulti],
//     [Client.TryLockMulti], [Client.DoMulti].
//   - Segmented: package stripe maps many ids onto a fixed set of lock keys;
//     [Client.Counter] splits a count over segments with a lock each.
//   - Leader election: [Client.Election] (Campaign, Resign, Leader,
//     Observe, Run).
//
// The constructors of these handles never return an error and never call
// Redis: a bad argument is returned by every method call on the handle.
//
// Package fenced makes a Redis key a resource that refuses stale fences.
// [WithProtocol] runs other lock formats on the same engine (package
// protocol): package legacy is the SETNX/GETSET timestamp lock of older C#
// and Python code, package redlock takes a lock on a majority of
// independent masters. [Hooks] feed metrics and traces (package outcome
// classifies their errors; modules dlockprom and dlockotel use them).
//
// # Where the details are
//
//   - How it works (scripts, queue and hand-off, watchdog, fencing, the
//     other kinds, Cluster and pub/sub): docs/design.md.
//   - Every Redis key and channel dlock uses: docs/keys.md.
//   - Guarantees, limits and the fault-injection results: docs/guarantees.md.
//   - Defaults: the comments of the [Options] fields.
//   - Errors: errors.go. Every error matches one of its sentinels with
//     errors.Is; bad input matches [ErrInvalidArgument], is refused before
//     any Redis call, and never makes the package panic.
//
// The documents are in the repository, https://github.com/dlock-go/dlock.
package dlock
