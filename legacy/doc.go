// Package legacy is the SETNX + GETSET timestamp lock that older C# code
// (CSRedis) and Python code (redis-py) took from the early Redis locking
// recipes and that many deployed systems still use, as a
// [protocol.Protocol]. A Go service using it excludes, and is excluded by,
// those clients on the same key.
//
// Use it only to share lock keys with services that already speak this
// protocol. For anything else use dlock's default token lock; the reasons
// are below, and so is a plan for moving a fleet off this protocol.
//
//	c, err := dlock.New(rdb, dlock.Options{})
//	...
//	p := legacy.New(legacy.Options{Unit: legacy.Seconds}) // what the other clients use
//	err = c.Do(ctx, "lock.foo", func(ctx context.Context) error {
//		return work(ctx)
//	}, dlock.WithProtocol(p), dlock.WithTTL(3*time.Second))
//
// Everything but the commands on the lock key comes from the dlock engine:
// waiting (Lock, with a context bound), TryLock, Do, the renewal watchdog,
// Lock.Deadline, the lost-lock signal (Lock.Done, Lock.Err, Do's context),
// hooks and stats.
//
// # The protocol
//
// The lock key holds the lock's expiry time as a decimal Unix timestamp,
// now + timeout + 1, in seconds (older Python clients' int(time.time()), the
// default) or milliseconds (older C# clients' ToUnixTimeMilliseconds; Options.Unit).
// timeout is the lock's TTL rounded up to the unit; in seconds a TTL below
// one second counts as one second. The key has no Redis TTL, as in the
// older clients: a lock expires when the clients' clocks pass its timestamp, and a
// crashed holder's key stays in Redis until someone takes it over.
//
// The older clients' attempt is:
//
//	SETNX key v        1: acquired
//	GET key            stored >= now: held; wait and retry
//	GETSET key v       stored < now (expired): acquired only if the old
//	                   value GETSET returns is also expired, or nil
//
// with v = now+timeout+1. When several contenders find the lock expired,
// all of them run GETSET, but only the first gets back the expired value;
// the others get the winner's fresh value and lose. Their GETSET overwrote
// the winner's value with theirs, which the older clients accept as a small
// inaccuracy (the stored expiry moves a little, earlier too).
//
// dlock's attempt sends the same SETNX and GET, and takes an expired lock
// over with a compare-and-set instead of GETSET (takeover.lua): it sets
// the key to v only if the key still holds the expired value its GET read
// (or is gone, then like SETNX), and otherwise writes nothing and waits
// for the value it found. The stored values stay the same timestamps, so
// dlock and the older clients exclude each other as before: of a dlock
// takeover and an older client's GETSET, whichever lands first wins. But a
// dlock contender that loses never overwrites the winner's value, and a
// takeover that lands late (its caller gave up; the command was delayed)
// cannot replace a newer holder's value by its own, possibly earlier one,
// which would let a third client in while that holder still trusts its
// lock. An older client that loses its GETSET race against a dlock winner
// still overwrites the winner's value; the winner finds a foreign value at
// its next renewal and reports the lock lost (ErrTaken) although nobody
// else got it: a false alarm. The key then blocks contenders until the
// loser's timestamp passes.
//
// If the key disappears between SETNX and GET, the attempt sends SETNX once
// more (Python's int(None) would raise here; C#'s reads 0 and runs GETSET,
// which can overwrite a newcomer, so dlock does not). If a newcomer got in
// first, the attempt reports the key held with 0 time left, and Lock tries
// again at once.
//
// If the reply to a SETNX or a takeover is lost (a timeout, a cancelled
// context, a broken connection), nothing is undone: the attempt's value
// v = now+timeout+1 is not unique to it. Every client that locks in the
// same second (or millisecond) with the same timeout writes the same v, so
// a key holding v after a lost SETNX reply may be another client's live
// lock (its SETNX ran first, and ours failed), and deleting it would let a
// third client in beside that holder; after a lost takeover reply,
// another contender's takeover may have written the same v. Making v
// unique would change the value the older clients parse (Python's int()
// and C#'s long.Parse accept no fraction or suffix), so dlock never
// deletes v to compensate. The cost: if our write did land, the key keeps our timestamp until it
// passes, as if a holder had crashed (at most timeout+1 unit), and Lock
// waits for it like any holder's.
//
// The other actions on v follow from a reply that says this attempt wrote
// it: a release (the holder's Unlock, or the engine giving back a grant
// whose reply came after its validity) deletes the key if it holds v, as
// the protocol's release does; like every release of this
// protocol it trusts that nobody removed the value in between (only a DEL
// outside the protocol, such as the older C# release or an operator's
// ForceRelease, can).
//
// A release runs at most once. Its reply can be lost after it ran (the
// key deleted); then another client can take the key in the same unit
// with the same timeout, writing the same v, and a second run of the
// release (the Redis client re-sending it, a repeated Unlock, Close)
// would delete that client's lock and let a third in beside it. So each
// release carries a random id, and its first run leaves a tombstone under
// that id (the key's wait-queue name, ':', the id) until v has passed,
// plus ten seconds for clocks that differ (at least ten seconds, at most
// a day more); a repeat finds it, answers the first run's reply and
// writes nothing. dlock retries a release by sending the same call again.
//
// Renewal and release are Lua scripts that compare the stored value with
// the value this holder wrote last: renew.lua sets now+timeout+1 (never
// lowering the stored value, so a clock stepping back cannot shorten the
// claim), release.lua deletes the key and publishes on the key's wake-up
// channel. This is the classic "check before DEL, or you delete someone
// else's lock", made atomic. The older clients compare clocks instead: Python
// checks its own expiry before DEL, which fails only if the process pauses
// between check and DEL; the C# client checks that the *stored* value is
// in the future, which after a takeover is the new holder's value, so a C#
// holder that overran its timeout deletes the new holder's lock. dlock
// cannot protect against that; keep such clients' work well within their
// timeout.
//
// # Commands that land late or run twice
//
// A command can reach Redis after its caller gave up on it (a timeout
// while it was delayed), after a later command of the same lock, or twice
// (re-sent by the Redis client). For each write of this protocol:
//
//   - SETNX: if the key is free when it lands, the key holds v with nobody
//     trusting it, and stays blocked until v passes, as after a crashed
//     holder; otherwise it writes nothing.
//   - takeover.lua: a compare-and-set from the expired value the caller's
//     GET read. Landing after another contender took the key over, it
//     finds that holder's value and writes nothing. Like a release, it
//     runs at most once: its first run leaves a tombstone under the
//     attempt's random id (the key's wait-queue name, ':', the id), and a
//     repeat answers the first run's reply without writing. A first run
//     that lands when the key is free writes v with nobody trusting it, as
//     a late SETNX does.
//   - renew.lua: compare-and-set from a value the caller wrote. A copy
//     that lands after the key was freed and taken with the same value in
//     the same unit moves it later (renew.lua never lowers it): that
//     holder's next renewal reports a false loss (ErrTaken), and the key
//     stays blocked until the new value passes.
//   - release.lua: at most once, as above.
//
// The value rotates on every renewal; Lock.Token returns the current one.
// If a renewal's reply is lost (a timeout, a broken connection) after Redis
// ran it, the key holds the new value while the engine still knows the old
// one, so the next renewal or the release finds a "foreign" value: the lock
// is reported lost (ErrTaken), a false alarm, and the key stays blocked
// until its timestamp passes. (The token lock, whose value never changes,
// does not have this problem.)
// The watchdog renews every TTL/3 (dlock.Options.RenewInterval). Between
// renewals Lock.Deadline is the send time of the last acquire or renewal
// plus the TTL minus the drift allowance, on the monotonic clock; the stored
// timestamp is at least one unit later (by the holder's clock).
//
// The engine's waiters are woken by the pub/sub message dlock's release
// publishes. The older clients publish nothing when they DEL, so a dlock
// waiter behind one of them retries after the holder's remaining time, at
// most dlock.Options.RetryInterval (with jitter); lower RetryInterval if
// dlock clients must compete on equal terms with the older clients' busy loops.
//
// # Why the token lock is dlock's default
//
//   - Client clocks decide ownership. A client whose clock runs ahead takes
//     a live lock over early; one whose clock lags waits too long after a
//     crash. The token lock's expiry is kept by the Redis server alone.
//   - The older clients take an expired lock over with GETSET, which
//     overwrites whatever it finds, including a newer holder's value when
//     it lands late; only dlock's side of the protocol refuses that.
//     (ACL rules for dlock must allow SETNX, GET, EVALSHA and EVAL; GET,
//     SET, DEL and PUBLISH inside the scripts; and the waiters' SUBSCRIBE.)
//   - A paused holder (GC, SIGSTOP, a slow disk) can act after its lock has
//     expired and been taken over, and nothing stops it: the protocol has no
//     fencing token, so Lock.Fence() is always 0 and the protected resource
//     cannot reject the stale holder. (Its renewal and release, being
//     compare-and-set, cannot hurt the new holder.) The stored timestamp is
//     no substitute: it is not unique (two clients can write the same one)
//     and not monotonic across clients with different clocks or timeouts.
//   - An older client that loses the GETSET race overwrites the winner's
//     value, which can make the winner's renewal report a false loss
//     (above).
//   - No Redis TTL: a crashed holder's key is never removed by Redis. Locks
//     on many distinct keys (per order, per user) pile up in memory.
//
// # Clock skew
//
// Let u be the unit, ttl the lock's TTL and S how far another client's
// clock is ahead of the holder's. A lock whose value the holder wrote at
// time t can be taken over by that client from t + ttl + u - S on (a little
// later when ttl is not a whole number of units), while the holder trusts
// it until t + ttl - drift (drift: dlock.Options.DriftFactor*ttl +
// MinDrift). So:
//
//   - Without renewal, or after the last renewal that landed (Redis
//     unreachable, holder paused), the lock is exclusive only if
//     S < u + drift: about one second in Seconds, but only 1ms + drift in
//     Milliseconds, where clocks must be tightly synchronised. To tolerate a
//     known skew S in Milliseconds, set dlock.Options.MinDrift to at least S
//     (and keep the TTL several times larger than MinDrift).
//   - While renewals land every ttl/3, the claim stays about 2/3 ttl + u
//     ahead of the holder's clock, so a client ahead by less than that
//     cannot take the lock; a client ahead by more takes it over between
//     renewals, and the holder learns it at its next renewal (ErrTaken).
//   - A client whose clock lags by S takes over a crashed holder's lock S
//     late; a holder whose clock lags writes timestamps S early, which is
//     the same as everyone else running S ahead.
//
// Keep every client on NTP. Clients using seconds and clients using
// milliseconds must never share a key: a seconds timestamp read as
// milliseconds is in January 1970, so a milliseconds client takes any
// seconds lock over at once; the other way round, a milliseconds value
// looks 50,000 years away to a seconds client, which then waits forever.
//
// # Values that are not timestamps
//
// A lock key holding a string that is not a decimal integer (a token of
// another lock protocol, "", "12.5", garbage) was not written by this
// protocol. The attempt returns an error matching ErrNotTimestamp, which
// also matches dlock.ErrWrongType, so Lock returns it at once instead of
// waiting, and TryLock and Do return it too; the key is left untouched. It
// does not take the key over, because the likeliest writer is another
// protocol's live holder (dlock's token lock on the same key, redsync,
// redis-py's Lock) whose exclusion that would break, and it does not wait,
// because the value may have no TTL and never go away. The older clients
// fail here as well (Python's int() raises ValueError, C#'s GetLock catches
// the parse exception and returns false). Find the writer; then clear the
// key with `dlock release --force KEY` (admin.Client.ForceRelease) if it is
// abandoned. Surrounding white space and a sign are accepted, as Python's
// int() and C#'s long.Parse accept them; a number beyond int64 saturates (a
// huge one is far in the future, a hugely negative one expired). If a
// foreign value appears between GET and the takeover, the takeover leaves
// it and returns ErrNotTimestamp. A key holding another type (a list, a hash)
// gives dlock.ErrWrongType. During renewal or release, any value other
// than the holder's own means the lock is lost (ErrTaken; ErrWrongType too
// for another type).
//
// # Values far in the future
//
// A timestamp far ahead of now (a client with a wrong clock, a milliseconds
// writer on a seconds key, a bad writer) is a live lock to this protocol, as
// to the older clients: nobody takes it over before that time. There is no
// bound on legitimate timeouts to tell a wrong value from a long lock, and
// guessing would break exclusion. TryLock returns a *dlock.NotAcquiredError
// whose TTL is the time left until the stored timestamp (saturating at the
// largest time.Duration); Lock keeps waiting, retrying every
// dlock.Options.RetryInterval, until its context ends. Such a key stays
// locked until an operator removes it: `dlock release --force KEY`
// (admin.Client.ForceRelease), after fixing the writer.
//
// # Admin
//
// The protocol writes no fence counter, so `dlock list` (package admin's
// Client.List) finds legacy locks only when given a pattern (it then scans
// the string keys matching it); Inspect reports them as admin.KindLegacy.
// ForceRelease and ReleaseToken (with the stored timestamp as the token)
// work on them; ReleaseToken runs this protocol's release, at most once.
//
// # Migrating a fleet to the token lock
//
// The token lock cannot share the key with this protocol: each side reads
// the other's value as foreign (the older clients crash or fail on a token,
// dlock's legacy clients return ErrNotTimestamp, and a token client sees a
// timestamp without TTL as held forever). Migrate through a second key and a
// period in which new code takes both locks:
//
//  1. Inventory every program that takes the legacy key, with its unit and
//     timeout. Pick a new key for the token lock, say "lock.foo:v2".
//  2. Release "both": new code takes the legacy lock on the old key first,
//     then the token lock on the new key, always in this order (so two
//     "both" clients cannot deadlock), runs the critical section, and
//     releases in reverse order. With dlock that is a c.Do with
//     WithProtocol(legacy.New(...)) on the old key around a c.Do on the new
//     key. Old clients, still taking only the old key, are excluded by it.
//  3. Roll "both" out to every program, and replace the older clients,
//     until nothing takes only the old key. Verify it: every deployment
//     upgraded; no SETNX on the old key from unknown clients (ACL log,
//     MONITOR on a replica, client list).
//  4. Release "token only": drop the legacy lock from the code. This is
//     safe while "both" clients are still running, since they also take the
//     new key.
//  5. Once no "both" client is left, delete the old key if a crashed
//     holder left it (`dlock release --force lock.foo`) and remove its ACL
//     permissions.
//  6. Start using Lock.Fence() at the protected resource: the token lock's
//     fencing tokens are what stops a paused holder.
//
// Each step can be rolled back to the one before it.
package legacy
