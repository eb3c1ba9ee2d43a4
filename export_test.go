package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/redis/go-redis/v9"
)

// RedisOf returns the Redis client c runs on (for the tests' admin
// Clients: see adminOf).
func RedisOf(c *Client) redis.UniversalClient { return c.rdb }

// SplitSlots makes c group the keys of a multi-key lock by Cluster slot,
// as on a Cluster, so tests on one server exercise the cross-slot path.
func SplitSlots(c *Client) { c.splitSlots = true }

// ElectionNames returns the names of e's leader history and channel.
func ElectionNames(e *Election) (history, channel string) { return e.history, e.channel }

// RepublishForTest sends l's current publication again, as a Redis client
// re-sending it after a lost reply would.
func RepublishForTest(ctx context.Context, l *Leadership) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.publishLocked(ctx)
	return err
}

// RenewBurst renews every lock of locks once for ttl, now, the way the
// watchdog sends its batches, without applying the replies, and returns
// how long it took (see engine.Engine.RenewBurst).
func RenewBurst(c *Client, locks []*Lock, ttl time.Duration) time.Duration {
	leases := make([]*engine.Lease, len(locks))
	for i, lk := range locks {
		leases[i] = lk.l
	}
	return c.eng.RenewBurst(leases, ttl)
}

// RenewKeys renews keys[i], each holding tokens[i], once for ttl the way
// the watchdog does, and returns how many were not extended.
func RenewKeys(c *Client, keys, tokens []string, ttl time.Duration) int {
	return c.eng.RenewKeys(keys, tokens, ttl)
}

// RenewBatch is how many renewals the watchdog sends per pipeline.
const RenewBatch = engine.RenewBatch

// OwnSubscribed reports whether c's hand-off channel has been subscribed
// (from then on a Lock's first attempt joins the queue).
func OwnSubscribed(c *Client) bool { return c.notify.OwnSubscribed() }

// PipelineWriters is how many calls c's Redis client has in flight before
// further calls wait to be batched.
func PipelineWriters(c *Client) int { return c.exec.Writers() }

// PendingCalls is how many calls wait in c's pipeline for a writer.
func PendingCalls(c *Client) int { return c.exec.Pending() }

// UsesFunctions reports whether c runs its scripts by FCALL.
func UsesFunctions(c *Client) bool { return c.exec.Functions() }

// SleepingWaiters is how many blocked calls of c wait for their retry in
// the watchdog's heap.
func SleepingWaiters(c *Client) int { return c.eng.SleepingWaiters() }

// WatchdogWakes is how many times c's watchdog loop has woken.
func WatchdogWakes(c *Client) int64 { return c.eng.WatchdogWakes() }

// SetPubSubProbe sets the liveness probe of c's pub/sub connection: a probe
// every every (0: none) while c has waiters, due back within within. Call
// it before c waits.
func SetPubSubProbe(c *Client, every, within time.Duration) {
	c.notify.SetProbe(every, within)
}

// ProbePrefix starts every payload of a pub/sub liveness probe.
const ProbePrefix = notify.ProbePrefix

// SemaphoreAttempt makes one attempt for token to take n permits of the
// semaphore key of limit, as the engine sends it: mode is "try", "q1" (a
// waiter's first attempt: it queues if not granted), "q" (a waiter's
// retry) or "barge"; channel is the waiter's hand-off channel, lease its
// queue lease, pickup the time a hand-off to it waits. It reports whether
// the permits were granted. Called twice with the same arguments, it is
// the Redis client re-sending the attempt.
func SemaphoreAttempt(ctx context.Context, c *Client, key, token, mode, channel string, limit, n int, ttl, lease, pickup time.Duration) (bool, error) {
	q := &engine.Queue{Channel: channel, Lease: lease, Pickup: pickup, Exec: c.exec, Redis: c.rdb}
	s := semaphore{q: q, limit: limit, permits: n}
	g, err := s.Acquire(ctx, engine.Attempt{Mode: modeNamed(mode), Queue: q}, c.keysFor(key), token, ttl)
	return g.Acquired, err
}

// SetEvictRecheck sets how long c's verdict on the eviction policy stands;
// call it before c's first acquire.
func SetEvictRecheck(c *Client, d time.Duration) { c.evict.Recheck = d }

// HoldExpiry makes the watchdog's deadline expiry wait for release to be
// closed (a process paused past its locks' deadlines), and reports on
// reached when an expiry is held; the returned func undoes it.
func HoldExpiry(release <-chan struct{}, reached chan<- struct{}) (undo func()) {
	h := func() {
		select {
		case reached <- struct{}{}:
		default:
		}
		<-release
	}
	engine.HoldExpiry(h)
	return func() { engine.HoldExpiry(nil) }
}

// SetPlainPubSub makes the Clients made from now on keep hand-offs on
// plain pub/sub on a Cluster (true), or use sharded pub/sub (false).
func SetPlainPubSub(plain bool) { plainPubSub.Store(plain) }

// The limits the package checks, for the tests that pass them.
const (
	MaxKeyLength      = keyrules.MaxKeyLength
	MaxSemaphoreLimit = maxSemaphoreLimit
)
