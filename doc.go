// Package dlock provides distributed locks on Redis for Go: correct under
// faults where Redis allows it, honest where it does not.
//
// A Client wraps the go-redis v9 client an application already has (plain,
// Sentinel failover, Cluster or Ring). Lock waits for a key, TryLock makes
// one attempt, Do runs a function under a lock with a context that is
// cancelled if the lock is lost:
//
//	c, err := dlock.New(rdb, dlock.Options{})
//	...
//	err = c.Do(ctx, "nightly-report", func(ctx context.Context) error {
//		return build(ctx) // ctx is cancelled, with the cause, if the lock is lost
//	})
//
// # How it works
//
// Acquire is one script call: SET key token NX PX ttl, plus a fencing
// token drawn from a counter. Release and Extend compare the token first
// (compare-and-delete, compare-and-expire), so nobody deletes or extends a
// lock it does not own. Scripts run by EVALSHA with an EVAL fallback, so a
// NOSCRIPT after a restart or failover just works.
//
// The token is 128 random bits from crypto/rand. While a lock is held, one
// watchdog goroutine per Client renews all its locks every TTL/3 in
// pipelined batches. If a renewal finds the key gone or owned by someone
// else, or Redis stays unreachable until the lock's deadline, the lock is
// lost: Done is closed and Err says why (ErrExpired, ErrTaken,
// ErrUnreachable, all matching ErrLost).
//
// A blocked Lock subscribes to the key's wake-up channel on the Client's one
// shared pub/sub connection; the release script publishes on it. When no
// message comes (a foreign client released, the key expired) the waiter
// retries after the holder's remaining TTL, at most Options.RetryInterval,
// with jitter.
//
// # Key layout
//
// For a lock on key K with Options.Prefix P (default "dlock"):
//
//	K                 string: the holder's token, with a PX TTL
//	P:{K}:fence       string: the last fencing token handed out for K
//	P:{K}:wake        pub/sub channel: "released" is published on it
//
// K is used exactly as given, so any client that speaks SET K token NX PX
// plus compare-and-delete (StackExchange.Redis LockTake, redis-py Lock,
// node-redlock on one server, redsync, bsm/redislock) excludes and is
// excluded by dlock on the same key. The auxiliary names hash to K's
// Cluster slot and decode back to K unambiguously:
//
//	K = "orders:1"        (no hash tag)       P:{orders:1}:fence
//	K = "user:{42}:lock"  (own hash tag)      P:#user:{42}:lock:fence
//	K = "a}b{"            (a '}' but no tag)  P:{<tag>}=a}b{:fence
//
// In the last form <tag> is a short string known to hash to K's slot
// (wrapping K in braces would not: "{a}b{}" hashes "a").
// Slot computes the slot of any key.
//
// # Fencing tokens
//
// Every grant carries Fence(): max(last fence + 1, Redis TIME in
// microseconds). It increases strictly per key across all dlock clients,
// is unique per grant, and keeps increasing after the counter key expires
// (it expires TTL+10s after the last grant, so storage stays bounded). It
// goes back if Redis loses writes: a restart without persistence whose
// clock is behind, or a failover to a replica that missed the last grant.
//
// # Guarantees and limits
//
// On one Redis server that neither restarts without persistence nor fails
// over, at most one owner holds a key at a time, and Deadline() is never
// later than the moment Redis may expire the key: validity is computed from
// the time the acquire or renewal request was sent, on the monotonic clock,
// minus a drift allowance (TTL*0.01 + 2ms by default).
//
// No lease lock can stop a holder that pauses (GC, SIGSTOP, a slow disk)
// past its deadline from acting as the holder: the resource must check the
// fencing token. A Redis restart without persistence, or a Sentinel/Cluster
// failover to a replica that had not received the lock, lets a second owner
// in. Ring and Cluster spread different keys over nodes; one lock always
// lives on one node.
//
// # Errors
//
// Every error matches a sentinel in errors.go with errors.Is: ErrNotAcquired
// (TryLock found it held; *NotAcquiredError carries the TTL), ErrContextDone
// (joined with ctx.Err()), ErrLost and its causes, ErrNotHeld, ErrUnavailable
// (wrapping the driver error), ErrWrongType, ErrClosed, and the bad-input
// errors matching ErrInvalidArgument (ErrNilClient, ErrNilContext,
// ErrEmptyKey, ErrKeyTooLong, ErrInvalidTTL, ErrInvalidOpts). Bad input is
// rejected before any Redis call; no input makes the package panic.
package dlock
