// Package protocol is the plug-in surface of dlock's lock engine: what a
// lock key holds, and which commands take, renew and release it.
//
// A Protocol is implemented by
//   - dlock itself: the default token lock (SET key token NX PX, fenced,
//     with a FIFO wait queue) and its primitives, which need no selecting;
//   - package legacy: the SETNX/GETSET timestamp lock of older C# and
//     Python clients, wire-compatible with them;
//   - package redlock: Redlock over several independent masters, a
//     DirectProtocol;
//   - your own type, for another lock format some other program uses.
//
// A call selects one with dlock.WithProtocol:
//
//	lk, err := c.Lock(ctx, "report", dlock.WithProtocol(p))
//
// The engine of the dlock.Client does everything else the same way for
// every protocol: it makes the fresh random token each attempt may store,
// waits (pub/sub wake-ups on Keys.Wake and retries bounded by the holder's
// remaining TTL), withdraws whatever an attempt whose reply was lost may
// have written, renews held locks from its watchdog, keeps each lock's
// deadline and lost-lock signal, and runs the hooks and counts the stats.
// A protocol only answers for one attempt, one renewal and one release.
// Its renewals must never move a key's expiry earlier, even for a shorter
// TTL (see Protocol.Renew): the engine counts on it to keep a lock whose
// renewal lands late.
package protocol
