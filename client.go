package dlock

import (
	"context"
	"errors"
	"fmt"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/keyspace"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Client makes locks on one Redis deployment. It owns one renewal watchdog
// and at most one pub/sub connection, shared by all its locks and waiters.
// It is safe for concurrent use by multiple goroutines.
//
// Its handle constructors (RWLock, Semaphore, Reentrant, Counter,
// Election) never return an error and never call Redis: a bad argument
// (an empty or too long key, a limit or count below 1, a bad option) is
// returned, errors.Is-able with its sentinel and ErrInvalidArgument, by
// every method call on the handle.
type Client struct {
	rdb  redis.UniversalClient
	opts Options
	ring bool // rdb is a *redis.Ring: no shared pub/sub (see internal/notify)
	// splitSlots makes multi-key locks group keys by slot even on one
	// server, as on a Cluster (tests of the cross-slot path).
	splitSlots bool

	exec *rexec.Exec // runs the Client's script calls: its caller pipeline
	// tokenLocks[m] is tokenLock(m), made once (New): a protocol in an
	// interface is an allocation, which every acquire would pay otherwise.
	tokenLocks [modeBarge + 1]protocol.Protocol
	wd         *watchdog
	notify     *notify.Notifier
	feeds      feeds // election observers' shared reads
	stats      counters
	evict      evictCheck    // the masters' eviction policy (see evictionGate)
	closing    chan struct{} // closed by Close

	hookp   atomic.Pointer[Hooks] // the hooks installed now (see hooks)
	hooksMu sync.Mutex            // serialises AddHooks
	once    sync.Once

	bgMu      sync.Mutex     // guards bgDone, bgRunning and the Add side of bg
	bgDone    bool           // set by Close: no new background work
	bgRunning int            // background goroutines running (Close's WARN)
	bg        sync.WaitGroup // background work started by the Client
}

// plainPubSub keeps hand-offs on plain pub/sub on a Cluster for the
// Clients made while it is set (the side-by-side measurement of the two:
// see TestShardedPubSubBusMessages).
var plainPubSub atomic.Bool

// New returns a Client over rdb: a *redis.Client (also from
// redis.NewFailoverClient for Sentinel), *redis.ClusterClient or
// *redis.Ring. The Client does not close rdb. New makes no Redis call, so
// it checks no ACL rights: a refusal is reported where it happens, as
// ErrNoPermission (see docs/guarantees.md for the rights dlock needs).
// Nor does it check the eviction policy: the first acquire does (see
// Options.AllowEviction), or call CheckServers to check at start-up.
func New(rdb redis.UniversalClient, opts Options) (*Client, error) {
	if isNil(rdb) {
		return nil, ErrNilClient
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	_, ring := rdb.(*redis.Ring)
	if ring && o.MinReplicas > 0 {
		return nil, fmt.Errorf("%w: MinReplicas %d on a Ring, which has no replicas to wait for", ErrInvalidOpts, o.MinReplicas)
	}
	c := &Client{rdb: rdb, opts: o, ring: ring, closing: make(chan struct{})}
	c.evict.sem, c.evict.recheck = make(chan struct{}, 1), evictRecheck
	if ring || o.NoPubSub {
		// A Ring has no connection that hears every shard's hand-offs;
		// NoPubSub has none at all.
		c.opts.Barging = true
	}
	h := o.Hooks
	c.hookp.Store(&h)
	c.exec = rexec.New(rdb)
	if o.NoFunctions {
		c.exec.NoFunctions()
	}
	// A call riding out a Cluster's refusals ends when Close starts, as a
	// waiting Lock does; the Client's own releases and clean-ups
	// (clientRelease, background) keep theirs.
	c.exec.EndRefusalsOn(c.closing, ErrClosed)
	c.wd = newWatchdog(c)
	c.notify = notify.New(notify.Config{
		Redis: rdb, Own: o.Prefix + ":client:" + newToken(), Off: ring || o.NoPubSub,
		Logger: c.opts.Logger, Closing: c.closing, Closed: ErrClosed, IsToken: keyspace.IsToken, Plain: plainPubSub.Load(),
		Refused: func(err error) error {
			if pe := errs.Permission(err); pe != nil {
				return pe
			}
			return nil // not a typed nil
		},
		Redialed: func() {
			c.stats.pubsubRedials.Add(1)
			c.evict.stale()
		},
	})
	for m := range c.tokenLocks {
		c.tokenLocks[m] = c.newTokenLock(acquireMode(m))
	}
	return c, nil
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// tokenLock returns the default protocol configured for this Client, with
// acquire.lua's mode.
func (c *Client) tokenLock(mode acquireMode) protocol.Protocol {
	return c.tokenLocks[mode]
}

// newTokenLock makes tokenLock(mode).
func (c *Client) newTokenLock(mode acquireMode) protocol.Protocol {
	q := c.queueMode(mode)
	t := tokenLock{queueMode: q, args: newTokenArgs(q, c.opts.TTL)}
	if c.opts.MinReplicas > 0 {
		return ackedTokenLock{tokenLock: t, rdb: c.rdb, replicas: c.opts.MinReplicas, timeout: c.opts.ReplicaTimeout}
	}
	return t
}

// Options returns the Client's options with defaults filled in.
func (c *Client) Options() Options { return c.opts }

// Stats returns a snapshot of the Client's counters.
func (c *Client) Stats() Stats {
	s := c.stats.snapshot()
	s.Refusals = c.exec.Refusals()
	return s
}

// Close stops the watchdog and the pub/sub connection, wakes every waiting
// Lock call (they return ErrClosed), ends every call waiting to send
// again what a Cluster node refused (it returns ErrClosed), and releases every lock the Client
// still holds, and every lock whose Unlock failed: in pipelines, several
// at once, like renewals, all within one Options.ReleaseTimeout. As with
// Unlock, each lock ends (Done closes, Err returns ErrReleased) before its
// release is sent. If some could not be released it returns a *CloseError
// (matching ErrUnavailable) that says how many are left to expire by their
// TTL; those locks end as lost (from then on Err matches ErrLost and
// ErrClosed, and the Lost hook runs), since nothing renews them any more.
// Close is idempotent; later calls return nil.
//
// Close then waits for the Lost and Renew hook calls of the watchdog (and
// of the locks it ended), and for the Client's background clean-ups (the
// withdrawal of a waiter that gave up, the release after an acquire whose
// reply was lost) and the Lost hook of a loss an election's leader found,
// to return, but for at most another ReleaseTimeout in all: a hook that
// blocks, or a clean-up stuck on a server that does not answer, does not
// hang Close. Past it, Close logs a WARN with how many are still running
// and returns; they keep running until they return. Hooks must not block
// (see Hooks).
//
// A lock that an acquiring call got while Close ran is released by that
// call, which returns ErrClosed; if that release fails too, the lock is
// left in Redis until its TTL, logged at WARN, and not counted as held.
func (c *Client) Close() error {
	var err error
	c.once.Do(func() {
		close(c.closing)
		c.wd.wakeAllWaits() // blocked calls return ErrClosed
		close(c.wd.stop)
		<-c.wd.done
		c.wd.batches.Wait() // their round trips were cancelled by stop; hooks: waitAside below
		c.notify.Close()
		ctx, cancel := context.WithTimeout(clientRelease(), c.opts.ReleaseTimeout)
		defer cancel()
		// Every lease still held, also one whose Unlock failed (ended,
		// its release not confirmed): it is no longer renewed, and with
		// the watchdog stopped nothing would end it at its deadline.
		held := c.wd.live()
		left, rerrs := c.wd.releaseAll(ctx, held)
		err = errs.Close(left, len(held), rerrs)
		if err != nil {
			c.opts.Logger.Warn("dlock: Close left locks to expire by their TTL", "left", left, "of", len(held), "err", err)
		}
		// A lock Close could not release (or whose release is still in
		// flight) stays in Redis until its TTL, but nothing renews it and
		// no timer is left to end it at its deadline: end it now, so its
		// Done closes and its Err says why. A release that lands later
		// still counts as a release.
		for _, l := range held {
			if lost, _ := l.loseEnding(l.ctx, errs.ErrLeftByClose); lost != nil {
				c.stats.releasesLeft.Add(1)
				c.wd.reportLost(lost)
			}
		}
		// Background work started from now on runs on its caller's
		// goroutine (see background); what runs already is waited for
		// with the hooks, within one ReleaseTimeout.
		c.bgMu.Lock()
		c.bgDone = true
		c.bgMu.Unlock()
		c.waitAside(c.opts.ReleaseTimeout)
	})
	return err
}

func (c *Client) closed() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// background runs a token-checked clean-up call in the background, bounded
// by ReleaseTimeout: the delete after an acquire whose reply was lost (a
// timeout, a cancelled context, a broken connection), which would
// otherwise leave the key held by nobody for its TTL; and the withdrawal
// of a waiter that gave up. Close waits for them, at most ReleaseTimeout
// (see waitAside): a go-redis client may wait past ctx for a server that
// does not answer. Once Close is waiting, fn runs on the caller's
// goroutine.
func (c *Client) background(fn func(ctx context.Context) error) {
	run := func() {
		ctx, cancel := context.WithTimeout(rexec.OutlivingClose(context.Background()), c.opts.ReleaseTimeout)
		defer cancel()
		_ = fn(ctx)
	}
	if !c.goBackground(run) {
		run() // Close no longer waits for background work: do it here
	}
}

// reportAside runs lost, the report of a loss found off the watchdog (an
// election's refresher), on a goroutine of its own, which Close waits for
// at most ReleaseTimeout: its Lost hook may call back into what found the
// loss (Resign waits for the refresher). After Close it still runs on a
// goroutine of its own, not waited for.
func (c *Client) reportAside(lost func()) {
	if !c.goBackground(lost) {
		go lost()
	}
}

// goBackground runs f on a goroutine Close waits for (see waitAside),
// unless Close is waiting already: then it does nothing and returns false.
func (c *Client) goBackground(f func()) bool {
	c.bgMu.Lock()
	if c.bgDone {
		c.bgMu.Unlock()
		return false
	}
	c.bg.Add(1)
	c.bgRunning++
	c.bgMu.Unlock()
	go func() {
		defer func() {
			c.bgMu.Lock()
			c.bgRunning--
			c.bgMu.Unlock()
			c.bg.Done()
		}()
		f()
	}()
	return true
}

// waitAside is the end of Close: it waits for the goroutines reporting
// to hooks and for background work (see background), for at most d in
// all: a hook that never returns, or a clean-up stuck on a server that
// does not answer, must not hang Close. If some are still running then,
// it logs how many and returns; they end when they return (the reporting
// goroutines after running the reports queued behind them). Nothing may
// start more of either (the loop and the batches have stopped, and
// bgDone is set).
func (c *Client) waitAside(d time.Duration) {
	done := make(chan struct{})
	go func() {
		c.wd.hooks.Wait()
		c.bg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	running, queued := c.wd.hookCalls()
	c.bgMu.Lock()
	bg := c.bgRunning
	c.bgMu.Unlock()
	c.opts.Logger.Warn("dlock: Close stopped waiting for hook calls or background clean-ups that have not returned; they keep running (hooks must not block)",
		"running", running, "queued", queued, "background", bg, "waited", d)
}

// ambiguous reports whether err leaves unknown whether the command ran:
// anything but an error reply from Redis itself, and an error a script
// raised while running (it may have written before; see rexec.ScriptRaised).
func ambiguous(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		return rexec.ScriptRaised(re)
	}
	return err != nil
}

// acquired records the end of one acquire call.
func (c *Client) acquired(ctx context.Context, key string, start time.Time, attempts int, wait, waited bool, fence uint64, err error) {
	switch {
	case err == nil:
		c.stats.acquired.Add(1)
		c.stats.acquireNanos.Add(int64(time.Since(start)))
	case errors.Is(err, ErrNotAcquired), errors.Is(err, ErrContextDone):
		c.stats.notAcquired.Add(1)
	default:
		c.stats.errors.Add(1)
	}
	if h := c.hooks().Acquire; h != nil {
		h(ctx, AcquireInfo{Key: key, Fence: fence, Wait: time.Since(start), Attempts: attempts, Waited: waited, Try: !wait, Err: err})
	}
}
