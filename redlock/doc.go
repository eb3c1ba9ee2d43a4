// Package redlock implements Redlock, the Redis distributed-lock algorithm
// over N independent masters (https://redis.io/docs/latest/develop/use/patterns/distributed-locks/),
// as a [protocol.DirectProtocol]: the dlock.Client's engine provides waiting,
// the renewal watchdog, the deadline and the lost-lock signal, exactly as
// for a lock on one server.
//
//	nodes := []redis.UniversalClient{rdb1, rdb2, rdb3, rdb4, rdb5}
//	c, p, err := redlock.NewClient(nodes, redlock.Options{}, dlock.Options{})
//	...
//	lk, err := c.Lock(ctx, "nightly-report", dlock.WithProtocol(p))
//
// Give every node a client of its own, ideally with ContextTimeoutEnabled
// (so the per-node timeout also cuts the socket wait) and few or no
// retries (the Protocol's own retry uses a fresh value).
//
// The nodes must be distinct servers: a server given twice (127.0.0.1 and
// localhost, a DNS alias) would count twice towards a majority. New refuses
// two clients with one address; servers are also compared by identity (INFO
// server run_id), asked in the background from the first Acquire on, and
// every Acquire fails with a *SameServerError (ErrSameServer) once two nodes
// are known to be one server. Call CheckServers after New to refuse such a
// configuration before any lock, as `dlock run --redlock` does.
//
// # Algorithm
//
// Acquire sends SET key value NX PX ttl (a script that also reads the
// node's fence counter) to every node at once, value being 128 random bits
// fresh for each attempt, and waits at most Options.NodeTimeout for each.
// With a majority, it writes the grant's fencing token back (below); the
// lock is granted if that also reached a majority and some validity is
// left. The validity runs from the moment the engine called Acquire, before
// any request went out: it ends at that time + TTL − drift (TTL × 0.01 +
// 2ms by default), on the monotonic clock. That is the spec's "TTL minus
// the elapsed time minus the drift", and the lock's Deadline().
//
// An attempt that does not win deletes its value everywhere it may have
// written it: on the nodes that granted it and on those whose reply was an
// error or did not come in time (the SET may have run). A request still in
// flight when the attempt gave up deletes its own result when it lands, and
// deletes are retried on nodes that do not answer (for up to 5s), so a
// paused server that runs an old request when it resumes is cleaned up too.
//
// The outcome of one attempt is one of:
//   - granted: a majority took the key and the fence write-back reached a
//     majority, with validity left;
//   - not acquired: a majority answered, and either some other value holds
//     enough nodes to keep a majority out (the caller waits until enough
//     of them expire, or until their release is published), or nobody can
//     get a majority (a split vote: every contender cleans up and retries
//     after a random delay of up to Options.RetryJitter);
//   - an error: fewer than a majority answered (*QuorumError, matching
//     ErrNoQuorum), the attempt took longer than the validity (ErrTooSlow),
//     or non-strings on so many nodes that no majority is possible
//     (dlock.ErrWrongType). Lock returns it wrapped in dlock.ErrUnavailable
//     at once, as it does when a single Redis is down; it does not wait
//     for nodes to come back.
//
// Renewal (the watchdog, Extend) resets the TTL on every node holding the
// value (compare-and-expire) and succeeds if a majority did. If so many
// nodes report the key gone or someone else's that no majority is left,
// the lock is lost at once (dlock.ErrExpired, or dlock.ErrTaken if another
// value holds a node) and what is left of it is deleted. If errors or
// timeouts stand in the way, the engine retries until the deadline, then
// reports dlock.ErrUnreachable. A node whose key vanished is never taken
// again by a renewal: the key may have been someone else's in between, so
// a lock survives the loss of at most a minority over its lifetime.
//
// Release deletes the value on every node (compare-and-delete) and
// publishes on the key's wake-up channel on each. It succeeds if a
// majority answered.
//
// # Waiting
//
// The Client built by NewClient listens on nodes[0]'s pub/sub: a blocked
// Lock is woken by a release's publication there. If nodes[0] is down, or
// did not hold the lock, waiters take the lock by their fallback retries
// (after the holder's TTL, at most dlock.Options.RetryInterval) instead:
// slower, not wrong. There is no FIFO queue across nodes: waiters race.
//
// # Fencing tokens
//
// Each node keeps a counter per lock key (dlock's fence counter key). The
// acquire script returns the node's counter (or, if it has none, the
// node's TIME in microseconds); the token is the maximum over the nodes
// that granted the attempt, plus one. Before the grant is declared, a
// second script raises the counter of each of those nodes to the token
// ("set if greater"), but only where the lock key still holds the
// attempt's value, and a majority must confirm it.
//
// Why that makes tokens strictly increase across grants, even when
// successive grants use different majorities: grant G1 has written its
// token T1 to a majority W1, each while G1 held the key there. A later
// grant G2 took the key on a majority M2, which shares a node X with W1.
// G2's SET NX on X succeeded, so G1's key on X was gone, so G1's write-back
// on X had happened before; counters never decrease; so X reported at
// least T1 to G2, and T2 ≥ T1 + 1. Taking only the maximum of per-node
// counters, without the write-back, is not monotonic: with counters A=4,
// B=0, C=0, a grant on {A,B} gets 5 and a later one on {B,C} gets less.
//
// Counters expire 10s after the lock's last grant or renewal (as in
// dlock), and a node without one reports its clock in microseconds. Since
// tokens grow by one per grant, far slower than a microsecond clock, a
// token drawn from clocks is above every earlier one, provided the nodes'
// clocks are not behind the clock that started the counter by more than
// the time elapsed since. The same holds when a node restarts without its
// data. The cost of the write-back is a second round trip per grant.
//
// # Preconditions
//
// Redlock is safe only under the spec's assumptions. The tests show what
// happens when they are broken.
//
//   - Bounded pauses, network delays and clock drift. A holder that pauses
//     past its Deadline (GC, SIGSTOP, swapping) acts without the lock, as
//     with any lease; the resource must check the fencing token. Clocks
//     must advance at about the same rate (the drift allowance covers 1%);
//     a server whose clock jumps forward expires keys early and can hand a
//     second client its part of a majority.
//   - Nodes that remember. A node that restarts without the keys it held
//     (no persistence, or AOF with appendfsync everysec after a power loss)
//     can let a second client assemble a majority while the first holder's
//     lock is still valid: TestRestartWithoutPersistence builds that
//     violation deterministically. Run the nodes with appendfsync always,
//     or keep a crashed node down for longer than the largest TTL before it
//     rejoins (a delayed restart: TestDelayedRestart shows the holder's
//     validity ending before anyone else can get the lock).
//   - Independent nodes. Each node must be its own master, not replicated
//     to the others. A node may be a Sentinel or Cluster deployment, but a
//     failover inside it can lose writes like a restart without
//     persistence.
//
// # Limits
//
//   - Package admin, over nodes[0], sees that node's keys only (Inspect,
//     List, ForceRelease).
//   - A grant takes two round trips (the fence write-back).
//   - A request abandoned at the node timeout may still run on its server
//     later; it is deleted by the clean-up retries, or expires within one
//     TTL, holding that node meanwhile.
//   - A node that answers after the others granted the lock joins the
//     hold; if its SET lands only after the lock's Unlock (a slow node,
//     a lock released at once), that node keeps the value until its TTL.
//     It is a minority: it keeps nobody from a majority.
//   - Clean-up requests run in the background for up to 5s after the call
//     that started them returned, also after the Client is closed.
package redlock
