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

	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/evictpolicy"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/redis/go-redis/v9"
)

// Client makes locks on one Redis deployment. It owns one renewal watchdog
// and at most one pub/sub connection, shared by all its locks and waiters.
// It is safe for concurrent use by multiple goroutines.
//
// Its handle constructors (RWLock, Semaphore, Reentrant, Counter,
// Election) never return an error and never call Redis: a bad argument
// (an empty key or one over 64 KiB, a limit or count below 1, a bad option) is
// returned, errors.Is-able with its sentinel and ErrInvalidArgument, by
// every method call on the handle.
type Client struct {
	rdb  redis.UniversalClient
	opts Options
	ring bool // rdb is a *redis.Ring: no shared pub/sub (see internal/notify)
	// splitSlots makes multi-key locks group keys by slot even on one
	// server, as on a Cluster (tests of the cross-slot path).
	splitSlots bool

	exec  *rexec.Exec   // runs the Client's script calls: its caller pipeline
	queue *engine.Queue // the queue settings of the Client's protocols
	// token is the Client's token lock, made once (New): a protocol in an
	// interface is an allocation, which every acquire would pay otherwise.
	token   engine.Protocol
	eng     *engine.Engine // leases, watchdog, retry clock, background work, counters
	notify  *notify.Notifier
	feeds   feeds             // election observers' shared reads
	evict   *evictpolicy.Gate // the masters' eviction policy, checked before a grant
	closing chan struct{}     // closed by Close

	hookp   atomic.Pointer[Hooks] // the hooks installed now (see hooks)
	hooksMu sync.Mutex            // serialises AddHooks
	once    sync.Once
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
	c.evict = evictpolicy.NewGate(rdb, o.AllowEviction, o.Logger, func(s []string) error { return &EvictionError{Servers: s} })
	if ring || o.NoPubSub {
		// A Ring has no connection that hears every shard's hand-offs;
		// NoPubSub has none at all.
		c.opts.Barging = true
	}
	c.exec = rexec.New(rdb)
	if o.NoFunctions {
		c.exec.NoFunctions()
	}
	// A call riding out a Cluster's refusals ends when Close starts, as a
	// waiting Lock does; the Client's own releases and clean-ups
	// (engine.ClientRelease, Background) keep theirs.
	c.exec.EndRefusalsOn(c.closing, ErrClosed)
	c.notify = notify.New(notify.Config{
		Redis: rdb, Own: o.Prefix + ":client:" + engine.NewToken(), Off: ring || o.NoPubSub,
		Logger: c.opts.Logger, Closing: c.closing, Closed: ErrClosed, IsToken: keyspace.IsToken, Plain: plainPubSub.Load(),
		Refused: func(err error) error {
			if pe := errs.Permission(err); pe != nil {
				return pe
			}
			return nil // not a typed nil
		},
		Redialed: func() {
			c.eng.Stats.PubSubRedials.Add(1)
			c.evict.Stale()
		},
	})
	c.queue = &engine.Queue{Channel: c.notify.Own(), Lease: o.WaiterLease, Pickup: o.PickupTimeout,
		Exec: c.exec, Notify: c.notify, Redis: rdb}
	c.eng = engine.New(engine.Config{Redis: rdb, Exec: c.exec, Timing: o.timing(), ReleaseTimeout: o.ReleaseTimeout,
		ResendWindow: o.ReleaseResendWindow, Logger: o.Logger, Closing: c.closing, GroupOf: c.groupOf, Notify: c.notify, Queue: c.queue,
		RetryInterval: o.RetryInterval, Barging: c.opts.Barging, Gate: c.evict.Check, Stale: c.evict.Stale})
	h := o.Hooks
	c.setHooks(&h)
	c.token = c.newTokenLock()
	return c, nil
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// newTokenLock makes the Client's token lock: with MinReplicas, one that
// waits for the replicas.
func (c *Client) newTokenLock() engine.Protocol {
	t := tokenLock{q: c.queue, args: newTokenArgs(c.queue, c.opts.TTL)}
	if c.opts.MinReplicas > 0 {
		return ackedTokenLock{tokenLock: t, rdb: c.rdb, replicas: c.opts.MinReplicas, timeout: c.opts.ReplicaTimeout}
	}
	return t
}

// Options returns the Client's options with defaults filled in.
func (c *Client) Options() Options { return c.opts }

// Stats returns a snapshot of the Client's counters.
func (c *Client) Stats() Stats {
	s := snapshot(&c.eng.Stats)
	s.Refusals = c.exec.Refusals()
	return s
}

// Close stops the watchdog and the pub/sub connection, wakes every waiting
// call (they return ErrClosed), and releases every lock the Client still
// holds, and every lock whose Unlock failed, in pipelines, all within one
// Options.ReleaseTimeout. As with Unlock, each lock ends (Done closes, Err
// returns ErrReleased) before its release is sent. If some could not be
// released it returns a *CloseError (matching ErrUnavailable); those locks
// end as lost (Err matches ErrLost and ErrClosed, the Lost hook runs) and
// stay in Redis until their TTL. Close is idempotent; later calls return
// nil.
//
// Close then waits for the watchdog's hook calls and the Client's
// background clean-ups to return, for at most another ReleaseTimeout; past
// it, it logs a WARN and returns, leaving them running. A lock an
// acquiring call got while Close ran is released by that call, which
// returns ErrClosed.
func (c *Client) Close() error {
	var err error
	c.once.Do(func() {
		close(c.closing)
		err = c.eng.Close(c.notify.Close)
	})
	return err
}

func (c *Client) closed() bool { return c.eng.Closed() }

// acquired records the end of one acquire call.
func (c *Client) acquired(ctx context.Context, key string, start time.Time, attempts int, wait, waited bool, fence uint64, err error) {
	switch {
	case err == nil:
		c.eng.Stats.Acquired.Add(1)
		c.eng.Stats.AcquireNanos.Add(int64(time.Since(start)))
	case errors.Is(err, ErrNotAcquired), errors.Is(err, ErrContextDone):
		c.eng.Stats.NotAcquired.Add(1)
	default:
		c.eng.Stats.Errors.Add(1)
	}
	if h := c.hooks().Acquire; h != nil {
		h(ctx, AcquireInfo{Key: key, Fence: fence, Wait: time.Since(start), Attempts: attempts, Waited: waited, Try: !wait, Err: err})
	}
}
