package dlock

import (
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/defaults"
	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/errs"
)

// Options configures a Client. The zero value is valid: every field's
// default is stated next to it. docs/design.md and docs/guarantees.md
// explain what each trades.
type Options struct {
	// Prefix starts the name of every auxiliary key and channel
	// ("<Prefix>:{key}:fence", "<Prefix>:{key}:wake"). It must not contain
	// '{', '}' or '#'. Default: "dlock".
	Prefix string

	// TTL is the lock time-to-live when a call does not set one with
	// WithTTL. Default: 10s.
	TTL time.Duration

	// RenewInterval is how often the watchdog renews a held lock; TTL/2 or
	// more is lowered to TTL/2. Default: a third of each lock's TTL.
	RenewInterval time.Duration

	// DriftFactor and MinDrift make the drift allowance subtracted from
	// every validity, TTL*DriftFactor + MinDrift, so Deadline() comes before
	// Redis can expire the key. Defaults: 0.01 and 2ms (the Redis
	// distributed-lock spec's). A negative value means zero.
	DriftFactor float64
	MinDrift    time.Duration

	// RetryInterval bounds how long a blocked Lock waits for a wake-up
	// before it tries again anyway (the smaller of this and the holder's
	// remaining TTL, plus jitter). Default: 1s.
	RetryInterval time.Duration

	// Barging turns the FIFO wait queue off: waiters race for the key
	// after each release instead of the release handing it to the oldest
	// waiter. It is slower and less fair under contention
	// (bench/RESULTS.md); use it for a Ring (forced) or to keep queue state
	// out of Redis. Barging waiters can overtake queued ones on the same
	// key. Default: false (FIFO).
	Barging bool

	// NoPubSub makes the Client wait without pub/sub, for a Redis user
	// whose ACL grants no channels: it never subscribes, a blocked call
	// wakes only on its retry timer, election observers poll, and it
	// implies Barging. Without it, such a user's waiting calls return
	// ErrNoPermission. Default: false.
	NoPubSub bool

	// PickupTimeout is how long a hand-off waits for the waiter to confirm
	// it before the next waiter's retry takes the lock. Keep it well under
	// the lock TTL. Default: 1s.
	PickupTimeout time.Duration

	// WaiterLease is how long a queued waiter stays in the queue without
	// refreshing its entry (it refreshes every third of it). Default: 3s.
	WaiterLease time.Duration

	// MinReplicas, when above 0, makes every grant, renewal, release and
	// withdrawal of the token lock wait (Redis WAIT) until at least this
	// many replicas acknowledged it, at most ReplicaTimeout. If fewer did,
	// an acquire releases the lock and returns ErrReplicaAck; a renewal
	// counts as failed; a withdrawal or release is sent again within
	// ReleaseTimeout, and Unlock returns ErrReplicaAck if it never was
	// acknowledged. Renewals then take one round trip per lock. It narrows
	// the failover window, it does not close it (WAIT is not consensus):
	// see docs/guarantees.md. Not for Ring. Default: 0, no waiting.
	MinReplicas int

	// ReplicaTimeout bounds each WAIT. Default: 100ms.
	ReplicaTimeout time.Duration

	// ReleaseTimeout bounds each release the Client makes on its own (in
	// Close, after an ambiguous acquire, a waiter's withdrawal), how long
	// Unlock keeps sending a release that failed on a connection error or
	// a refusal, and how long Close waits for hooks and clean-ups still
	// running. Default: 5s.
	ReleaseTimeout time.Duration

	// ReleaseResendWindow: on a go-redis FailoverClient (Sentinel), when
	// the Client reaches a new master, the releases it made within this
	// time before are sent again (at most the last 2048), since the old
	// master may have lost them; Stats.ReleasesResent counts them. A
	// resend is harmless. Not for a plain Client, Cluster or Ring.
	// Default: 5s; negative: no resend.
	ReleaseResendWindow time.Duration

	// AllowEviction lets the Client acquire locks on a Redis whose
	// maxmemory-policy may evict keys (any but noeviction), logging a WARN
	// instead: an evicted lock key lets a second owner in. By default the
	// Client checks every master's policy before its first acquire, after
	// a failover or a connection error and at least every 10s, and
	// acquires return ErrEvictionPolicy while one may evict (held locks
	// are kept). Default: false.
	AllowEviction bool

	// NoFunctions makes the Client run its Lua scripts by EVALSHA only. By
	// default, on a server with Redis Functions (Redis 7.0+, Valkey), it
	// loads them as one library ("dlock_" and a hash of its code, one per
	// dlock version) and calls them by FCALL, falling back to EVALSHA when
	// the server refuses. Default: false.
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
