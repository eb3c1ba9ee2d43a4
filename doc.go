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
// The same calls take the other kinds of lock, chosen by an option; each
// returns a *Lock with the same lease, renewal, Done/Err loss signal,
// fencing token and errors:
//
//	c.Lock(ctx, "config", dlock.Shared())           // read lock; writers: Lock without Shared
//	c.Lock(ctx, "job:42", dlock.Reentrant(jobID))   // reentrant for an owner
//	c.Lock(ctx, "pool", dlock.Semaphore(3))         // one of 3 permits (Permits(n) for n)
//	c.LockMulti(ctx, []string{"acct:a", "acct:b"})  // several keys, all or nothing
//
// Client.Election runs a leader election on the same engine: candidates
// Campaign (queued in FIFO order), the leader's Leadership has the lock's
// Done/Err loss signal and its fence as the term, Resign hands over to the
// next candidate at once, and anyone can read the Leader or Observe every
// change (Run wraps the loop in client-go-style callbacks).
//
// NewStripes maps many logical keys onto a fixed set of lock keys, and
// Counter splits a count over segments with a lock each (a segmented lock, 分段锁).
//
// # How it works
//
// Acquire is one script call: SET key token NX PX ttl, plus a fencing
// token drawn from a counter. Release and Extend compare the token first
// (compare-and-delete, compare-and-expire), so nobody deletes or extends a
// lock it does not own. Scripts run by EVALSHA with an EVAL fallback, so a
// NOSCRIPT after a restart or failover just works. The script calls of
// concurrent goroutines share the Redis client by caller pipelining: a call
// goes out at once while one of a few writers is free, and the calls that
// arrive while all are busy leave together as one go-redis pipeline (split
// per node on a Cluster); each caller's context still bounds its own wait.
//
// The token is 128 random bits from crypto/rand. While a lock is held, one
// watchdog goroutine per Client renews all its locks every TTL/3 in
// pipelined batches. If a renewal finds the key gone or owned by someone
// else, or Redis stays unreachable until the lock's deadline, the lock is
// lost: Done is closed and Err says why (ErrExpired, ErrTaken,
// ErrUnreachable, all matching ErrLost).
//
// A blocked Lock joins the key's FIFO wait queue, in the same script call
// that found the key held. Release hands the key straight to the oldest
// live waiter: the script sets the key to that waiter's token with a short
// pickup TTL (Options.PickupTimeout) and publishes the SHA1 of the token
// (never the token, which would release the lock) on that waiter's Client
// channel only. The waiter confirms with one round trip,
// which sets the full TTL and draws the fence, and dates its validity from
// the moment it sent that confirmation, so a late message can never make
// it believe it holds an expired lock. While waiters are queued a newcomer
// queues behind them (no barging). Queue entries carry a lease the waiter
// refreshes (Options.WaiterLease); dead waiters are skipped, and a hand-off
// nobody confirms lapses and passes on at the next waiter's retry. Waiters
// also retry on their own after min(holder's TTL, a third of their lease,
// RetryInterval), with jitter, which covers foreign clients that know
// nothing of the queue. Options.Barging turns the queue off: waiters then
// listen on the key's wake-up channel and race, like other libraries.
//
// The other kinds of lock reuse the queue, the hand-off and the lease:
//   - A shared (read) lock: the key holds SharedValue while read, and a
//     sorted set beside it has one member per reader, scored with the end
//     of that reader's lease; each reader's renewal moves its own score, and
//     the key expires with the last lease. A crashed reader expires alone.
//     Writers are plain exclusive locks. A reader does not get in while a
//     writer is queued ahead of it; a writer's release hands the key to the
//     first queued reader, which lets in the readers queued behind it.
//   - A reentrant lock is the same structure with the owner id as the
//     key's value: the owner's acquisitions join the hold (without queueing),
//     other owners queue; the hold count is the number of live handles.
//   - A semaphore's key is a sorted set of holders scored with their lease
//     ends; a release hands the permits it frees to the queued waiters they
//     let in, in order, publishing to each: as many wake-ups as grants.
//   - A multi-key lock puts the same token in every key. Keys in one slot
//     are taken by one script; across slots, slot by slot in a canonical
//     order. A waiting multi-key lock keeps the keys it has (in that order)
//     while it queues for the next, which cannot deadlock.
//
// Every shared script (fencing, the queue, leased handle sets) is a Lua
// function in scripts/lib, prepended to the scripts that use it.
//
// Each Client uses one pub/sub connection for all its waiters. On Redis
// Cluster the hand-off is a plain PUBLISH on the waiter's Client channel,
// which the cluster bus carries to every node. Sharded pub/sub (SPUBLISH)
// would keep it on one shard, but its channel must hash to the lock's slot:
// a per-key channel, so a SSUBSCRIBE and SUNSUBSCRIBE per wait and a
// connection per shard. dlock prefers the constant connection count.
//
// # Key layout
//
// For a lock on key K with Options.Prefix P (default "dlock"):
//
//	K                 string: the holder's token, with a PX TTL; read-locked:
//	                  SharedValue ("dlock:shared"); reentrant:
//	                  ReentrantPrefix + the owner id (both expire with the
//	                  last live handle's lease)
//	P:{K}:fence       string: the last fencing token handed out for K
//	P:{K}:q           list: tokens of the queued waiters, oldest first;
//	                  expires with the longest lease of its waiters
//	P:{K}:q:<token>   string: a queued waiter's lease (PX), holding its
//	                  Client's hand-off channel, then "{r" for a reader or
//	                  "{<n>" for a semaphore waiter of n permits; a "!" in
//	                  front while a hand-off to it awaits its confirmation;
//	                  deleted when the waiter is granted; "~" for 10 s
//	                  after the waiter left for good or the holder of that
//	                  token released (a tombstone: every acquire refuses
//	                  that token, so a late one lands on nothing, and a
//	                  re-sent release of it answers "released")
//	P:{K}:wake        pub/sub channel: "released" when K is freed with
//	                  nobody queued (for Barging waiters)
//	P:{K}:readers     sorted set: the readers of a read-locked K, each
//	                  scored with its lease end (server time, ms)
//	P:{K}:holds       sorted set: a reentrant owner's handles, likewise
//	P:client:<id>     pub/sub channel of one Client: hand-offs to its waiters
//
// An election named K is the lock K (holding the leader's token) plus:
//
//	P:{K}:leader      list: the last 64 leader records, newest first, each
//	                  "<term>:<rev>:<since ms>:<SHA1 of the token>:<value>";
//	                  expires 2*TTL+10s after the last leader's refresh
//	P:{K}:elected     pub/sub channel: "<term>:<rev>" at each change
//
// A semaphore named K uses K itself and three more:
//
//	K                 sorted set: holder token -> lease end (server ms)
//	P:{K}:permits     hash: holder token -> permits held; "#used": their sum
//	P:{K}:limit       string: the limit set by SetLimit (no TTL)
//
// (with P:{K}:fence, :q, :q:<token> and :wake as above). A Counter's
// segment i is the lock key "<name>:<i>" plus P:{<name>:<i>}:count, the
// segment's count (no TTL). The sorted sets, the hash and the lock key of
// a shared hold expire with the last lease in them.
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
// Every name above except K (and the Client's channel) is reserved: a
// lock (or SetLimit, Inspect, ForceRelease, FencedSet) on a key that is
// one of them under the Client's prefix is refused before any Redis call
// with ErrReservedKey, naming the lock and kind it belongs to
// (Client.AuxKeyOf decodes any name). A prefix may not contain '{', '}' or
// '#', so no two (prefix, key) pairs share an auxiliary name.
//
// In the last form <tag> is a short string known to hash to K's slot
// (wrapping K in braces would not: "{a}b{}" hashes "a"). The waiter lease
// keys are not declared to the scripts (their names depend on the queue's
// content); they carry the queue key's hash tag, so they always live in
// the declared keys' slot. Slot computes the slot of any key.
//
// # Fencing tokens
//
// Every grant carries Fence(): max(counter + 1, Redis TIME in
// microseconds), stored back in the fence counter. It increases strictly
// per key across all dlock clients, is unique per grant, and keeps
// increasing after the counter expires (TTL+10s after the last grant or
// renewal, so storage stays bounded), after a restart without persistence,
// and after a failover to a replica that missed the last grants: the clock
// term is above every fence handed out before, as long as the server that
// draws it has a clock that is not behind the clock of the server that drew
// the last fence (fences are at most TIME at the moment they are drawn,
// plus the grants drawn within one microsecond). The precise condition:
// fences repeat or go back only if Redis loses the counter's last writes
// AND the new server's TIME is behind the old server's TIME at its last
// grant (a clock stepped back, or a replica on a machine whose clock lags).
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
// (wrapping the driver error), ErrWrongType (also: a semaphore and a plain
// lock on one key), ErrExhausted (Counter), ErrClosed, and the bad-input
// errors matching ErrInvalidArgument (ErrNilClient, ErrNilContext,
// ErrEmptyKey, ErrKeyTooLong, ErrInvalidTTL, ErrInvalidOpts, ErrInvalidOwner,
// ErrInvalidLimit, ErrInvalidPermits, ErrInvalidCount, ErrAuxKey). Their
// messages name the value given and the limit it broke. Bad input is
// rejected before any Redis call (except Permits above a limit lowered by
// SetLimit, found by the acquire); no input makes the package panic.
package dlock
