package dlock

import (
	"fmt"
	"github.com/dlock-go/dlock/internal/errs"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/defaults"
	"github.com/dlock-go/dlock/internal/engine"
)

// Options configures a Client. The zero value is valid: every field's
// default is stated next to it.
type Options struct {
	// Prefix starts the name of every auxiliary key and channel
	// ("<Prefix>:{key}:fence", "<Prefix>:{key}:wake"). It must not contain
	// '{', '}' or '#': with them, two (prefix, key) pairs could name the same
	// auxiliary key. Glob characters are fine (they are escaped in SCAN
	// patterns). Default: "dlock".
	Prefix string

	// TTL is the lock time-to-live when a call does not set one with
	// WithTTL. Default: 10s.
	TTL time.Duration

	// RenewInterval is how often the watchdog renews a held lock. It must be
	// shorter than the lock's TTL; a value of TTL/2 or more is lowered to
	// TTL/2. Default: a third of each lock's TTL (TTL/3, the interval StackExchange.Redis users renew at).
	RenewInterval time.Duration

	// DriftFactor and MinDrift make the drift allowance subtracted from
	// every validity: TTL*DriftFactor + MinDrift, so Deadline() comes before
	// Redis can expire the key even if clocks run at slightly different
	// rates. Defaults: 0.01 and 2ms (the Redis distributed-lock spec's).
	// A negative value means zero.
	DriftFactor float64
	MinDrift    time.Duration

	// RetryInterval bounds how long a blocked Lock waits for a wake-up
	// before it tries again anyway (a foreign client that publishes nothing
	// released the key, or a message was lost). The actual wait is the
	// smaller of this and the holder's remaining TTL, plus a little jitter.
	// Default: 1s.
	RetryInterval time.Duration

	// Barging turns the FIFO wait queue off. By default a blocked Lock joins
	// the key's queue and the releasing script hands the lock straight to
	// the oldest live waiter, which confirms it with one round trip: fair,
	// and one wake-up per release. With Barging, waiters listen on the
	// key's channel and race for the key after a release, as with other
	// libraries: no queue entries in Redis, and a process that releases can
	// re-take the key at once. Measured (bench/RESULTS.md), it is slower and
	// less fair than FIFO under contention (16 processes: 3.8k vs 5.8k
	// critical sections/s; 128: 479 vs 5.6k, fairness 0.06 vs 0.98), since
	// every process with a waiter wakes on each release. Use it for a Ring
	// (forced) or when queue state in Redis is unwanted. Waiters of both
	// kinds on one key: barging ones can overtake the queue.
	// Default: false (FIFO).
	Barging bool

	// NoPubSub makes the Client wait without pub/sub: it never subscribes,
	// and a blocked call wakes only on its retry timer (RetryInterval, or
	// the holder's remaining TTL if sooner), so a lock is taken up to a
	// RetryInterval after its release instead of at once. It implies
	// Barging (no FIFO queue: a hand-off nobody hears would wait for its
	// pickup time). Set it for a Redis user whose ACL grants no channels
	// (Redis 7's default acl-pubsub-default resetchannels, without
	// &<Prefix>:*): without it, a call that has to wait returns
	// ErrNoPermission once Redis refuses the subscription. Releases still
	// publish wake-ups for other Clients; a refused publish is skipped.
	// Election observers poll. Default: false.
	NoPubSub bool

	// PickupTimeout is how long a hand-off waits for the waiter to confirm
	// it. A waiter that died or stalls holds everyone up for at most this
	// long; then the next waiter's retry takes the lock. Keep it well under
	// the lock TTL. Default: 1s.
	PickupTimeout time.Duration

	// WaiterLease is how long a queued waiter stays in the queue without
	// refreshing its entry (it refreshes every third of it). A waiter that
	// died is skipped once its lease is over. Default: 3s.
	WaiterLease time.Duration

	// MinReplicas, when above 0, makes every grant, renewal, release and
	// withdrawal of the token lock wait (Redis WAIT, on the same connection
	// to the key's master) until at least this many replicas acknowledged
	// it, at most ReplicaTimeout. If fewer did, an acquire releases the lock and
	// returns ErrReplicaAck instead of a lock a failover could lose; a
	// renewal counts as failed (the deadline does not move, and the lock is
	// lost at it unless a later renewal is acknowledged); the withdrawal of
	// a token (a waiter that gave up, an acquire whose reply was lost) is
	// sent again within ReleaseTimeout, so that its tombstone, which
	// refuses a late acquire of that token, survives a failover; a release
	// is sent again, within ReleaseTimeout and until the lock's deadline,
	// so that a release the old master accepted just before a failover
	// also runs on the new one, and Unlock returns ErrReplicaAck (with
	// ErrUnavailable) if the replicas never acknowledged it, though the key
	// may be freed on the master all the same. Renewals then take one round trip per lock
	// instead of pipelined batches. On a Cluster, a MOVED or ASK reply (a
	// failover, a slot migration) is followed to the slot's new node within
	// the call's context. It narrows the failover window; it does not close
	// it (WAIT is not consensus): a write survives a failover only if the
	// replica promoted was among those that acknowledged it. Not for Ring.
	// Default: 0, no waiting.
	MinReplicas int

	// ReplicaTimeout bounds each WAIT. Default: 100ms.
	ReplicaTimeout time.Duration

	// ReleaseTimeout bounds each release the Client makes on its own: in
	// Close, the compensating release after an ambiguous acquire, and the
	// withdrawal of a waiter that gives up (retried until it answers or
	// this time is up). It also bounds how long Unlock (and Do's release)
	// keeps sending a release that failed on a connection error or a
	// refusal (a master killed, a failover under way) until it runs, and
	// how long Close waits for Lost and Renew hook calls and background
	// clean-ups still running (see Client.Close). Default: 5s.
	ReleaseTimeout time.Duration

	// ReleaseResendWindow: on a go-redis FailoverClient (Sentinel), when
	// the Client opens a connection to another address than its last one
	// (a failover's new master), the
	// releases it made within this time before are sent again, in the
	// background, each within ReleaseTimeout. The old master may have
	// accepted them after a replica was promoted, before the Client heard
	// of it, and lost them when it rejoined as a replica: without the
	// resend, the new master keeps those locks until their TTL. Sending a
	// release again is harmless (a token is never granted twice, and a
	// key that holds another token is untouched). The Client keeps the
	// most recent 2048 releases at most. Stats.ReleasesResent counts the
	// resends. Not for a plain Client, Cluster or Ring. Default: 5s;
	// negative: no resend.
	ReleaseResendWindow time.Duration

	// AllowEviction lets the Client acquire locks on a Redis that may
	// evict keys under memory pressure: a maxmemory-policy other than
	// noeviction (the volatile-* policies too, since every lock key has a
	// TTL; volatile-ttl evicts the shortest-lived keys, locks, first).
	// An evicted lock key lets a second owner in while the first still
	// holds the lock; docs/guarantees.md lists what each evicted key
	// costs. By default (false) the Client reads the policy of every
	// master before its first acquire, again after a failover or a
	// connection error and at least every 10s, and acquires return
	// ErrEvictionPolicy while one may evict (locks already held are
	// kept). With AllowEviction, they
	// proceed and the Client logs a WARN instead. A policy the server
	// refuses to tell (CONFIG and INFO both denied) is logged at WARN and
	// not refused. Default: false.
	AllowEviction bool

	// NoFunctions makes the Client run its Lua scripts by EVALSHA (EVAL
	// when the server lacks one) only. By default, where the server has
	// Redis Functions (Redis 7.0 or later, Valkey), the Client runs them
	// as the functions of one library, which costs the server less per
	// call: it loads the library (FUNCTION LOAD, on every master of a
	// Cluster) when a call finds it missing, and calls it by FCALL. The
	// library's name is "dlock_" and a hash of its code, one per dlock
	// version; FUNCTION DELETE of a version no process runs anymore is
	// safe (a process that still runs it loads it again). A call the
	// server refuses as a function is sent by EVALSHA instead: on a server
	// without Functions, or whose ACL denies FCALL or FUNCTION LOAD, the
	// Client uses EVALSHA from then on. Set NoFunctions to keep function
	// libraries off the server. Default: false.
	NoFunctions bool

	// Logger receives structured logs: lost locks at WARN, renewals and
	// wake-ups at DEBUG. Tokens are shortened, never logged in full.
	// Default: nil, silent.
	Logger *slog.Logger

	// Hooks are called on acquire, release, renewal and loss, for metrics
	// and tracing adapters. Client.AddHooks adds more after New. Default:
	// none.
	Hooks Hooks
}

// withDefaults validates o and fills in defaults.
func (o Options) withDefaults() (Options, error) {
	if err := validPrefix(o.Prefix); err != nil {
		return o, err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"TTL", o.TTL}, {"RenewInterval", o.RenewInterval}, {"RetryInterval", o.RetryInterval},
		{"ReleaseTimeout", o.ReleaseTimeout}, {"PickupTimeout", o.PickupTimeout}, {"WaiterLease", o.WaiterLease}} {
		if d.v < 0 {
			return o, fmt.Errorf("%w: %s %v is negative", ErrInvalidOpts, d.name, d.v)
		}
	}
	if o.TTL != 0 && (o.TTL < time.Millisecond || o.TTL > MaxTTL) {
		return o, &errs.TTLError{TTL: o.TTL, Min: time.Millisecond, Max: MaxTTL}
	}
	if o.Prefix == "" {
		o.Prefix = defaults.Prefix
	}
	if o.TTL == 0 {
		o.TTL = defaults.TTL
	}
	switch {
	case math.IsNaN(o.DriftFactor) || o.DriftFactor > maxDriftFactor:
		return o, fmt.Errorf("%w: DriftFactor %v is above %v (or NaN)", ErrInvalidOpts, o.DriftFactor, maxDriftFactor)
	case o.DriftFactor == 0:
		o.DriftFactor = defaults.DriftFactor
	case o.DriftFactor < 0:
		o.DriftFactor = 0
	}
	switch {
	case o.MinDrift == 0:
		o.MinDrift = defaults.MinDrift
	case o.MinDrift < 0:
		o.MinDrift = 0
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = defaults.RetryInterval
	}
	if o.ReleaseTimeout == 0 {
		o.ReleaseTimeout = defaults.ReleaseTimeout
	}
	switch {
	case o.ReleaseResendWindow == 0:
		o.ReleaseResendWindow = defaults.ReleaseResendWindow
	case o.ReleaseResendWindow < 0:
		o.ReleaseResendWindow = -1
	}
	if o.PickupTimeout == 0 {
		o.PickupTimeout = defaults.PickupTimeout
	}
	if o.WaiterLease == 0 {
		o.WaiterLease = defaults.WaiterLease
	}
	if o.MinReplicas < 0 || o.ReplicaTimeout < 0 {
		return o, fmt.Errorf("%w: MinReplicas %d or ReplicaTimeout %v is negative", ErrInvalidOpts, o.MinReplicas, o.ReplicaTimeout)
	}
	if o.ReplicaTimeout == 0 {
		o.ReplicaTimeout = defaults.ReplicaTimeout
	}
	if o.PickupTimeout < time.Millisecond || o.WaiterLease < 3*time.Millisecond {
		return o, fmt.Errorf("%w: PickupTimeout %v is below 1ms or WaiterLease %v below 3ms", ErrInvalidOpts, o.PickupTimeout, o.WaiterLease)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if !o.ttlWorks(o.TTL, true) {
		return o, o.ttlError(o.TTL, true)
	}
	return o, nil
}

// maxDriftFactor bounds DriftFactor: beyond half the TTL, the drift
// allowance leaves too little validity to renew in.
const maxDriftFactor = 0.5

// MaxTTL is the longest lock TTL accepted.
const MaxTTL = engine.MaxTTL

// timing is how the Client's engine times its leases.
func (o *Options) timing() engine.Timing {
	return engine.Timing{DriftFactor: o.DriftFactor, MinDrift: o.MinDrift, RenewInterval: o.RenewInterval}
}

// ttlWorks reports whether a lock with ttl can live (see engine.Timing).
func (o *Options) ttlWorks(ttl time.Duration, renew bool) bool {
	return o.timing().TTLWorks(ttl, renew)
}

// ttlError is the ErrInvalidTTL for ttl (see engine.Timing).
func (o *Options) ttlError(ttl time.Duration, renew bool) error {
	return o.timing().TTLError(ttl, renew)
}

// drift is the allowance subtracted from a validity of ttl.
func (o *Options) drift(ttl time.Duration) time.Duration { return o.timing().Drift(ttl) }

// renewEvery is how often a lock with this ttl is renewed.
func (o *Options) renewEvery(ttl time.Duration) time.Duration { return o.timing().RenewEvery(ttl) }

// LockOption changes one acquire: Client.Lock, TryLock, Do and their
// Multi forms, and the acquires of RWLock, Semaphore and Reentrant.
type LockOption func(*lockConfig)

type lockConfig struct {
	ttl   time.Duration
	renew bool
	// proto is WithProtocol's protocol (nil: the Client's token lock, or
	// the typed handle's); withProto: WithProtocol was given.
	proto     engine.Protocol
	withProto bool
}

// WithTTL sets the lock's time-to-live (at least 1ms). Default: Options.TTL.
func WithTTL(ttl time.Duration) LockOption {
	return func(c *lockConfig) { c.ttl = ttl }
}

// WithoutRenewal turns the watchdog off for this lock: it expires TTL after
// it was acquired unless Extend is called. Default: renewed until Unlock.
func WithoutRenewal() LockOption {
	return func(c *lockConfig) { c.renew = false }
}

func (c *Client) lockConfig(opts []LockOption) (lockConfig, error) {
	cfg := lockConfig{ttl: c.opts.TTL, renew: true}
	if len(opts) > 0 {
		cfg = applyLockOptions(cfg, opts)
	}
	if !c.opts.ttlWorks(cfg.ttl, cfg.renew) {
		return cfg, c.opts.ttlError(cfg.ttl, cfg.renew) // expired when handed out, or before its first renewal
	}
	if cfg.withProto && cfg.proto == nil {
		return cfg, fmt.Errorf("%w: WithProtocol(nil)", ErrInvalidOpts)
	}
	return cfg, nil
}

// exclusiveOnly refuses a typed handle's lock other than RWLock's writer
// on a Client with MinReplicas.
func (c *Client) exclusiveOnly() error {
	if c.opts.MinReplicas > 0 {
		return fmt.Errorf("%w: MinReplicas applies to exclusive locks only (not RWLock readers, Reentrant or Semaphore)", ErrInvalidOpts)
	}
	return nil
}

// applyLockOptions returns cfg with opts applied. Apart from lockConfig,
// so that a call without options does not move cfg to the heap (an option
// takes its address).
func applyLockOptions(cfg lockConfig, opts []LockOption) lockConfig {
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	return cfg
}

// validPrefix refuses a prefix with '{', '}' or '#': auxiliary names are
// "<prefix>:" then '#' or '{' (see keyspace.Base), so with none of them in any
// prefix, where the prefix ends in a name is unambiguous and no two
// (prefix, key) pairs share an auxiliary name. "" means the default.
func validPrefix(p string) error {
	if i := strings.IndexAny(p, "{}#"); i >= 0 {
		return fmt.Errorf("%w: prefix %q contains %q (no '{', '}' or '#': they would let two locks share auxiliary keys)", ErrInvalidOpts, clip(p), p[i])
	}
	return nil
}
