// Package notify is the pub/sub notifier of a dlock Client: it owns the
// Client's pub/sub connections and their subscriptions (the Client's own
// hand-off channel and the wake-up channels of keys with local waiters;
// on Redis Cluster, sharded: a hand-off channel per slot and a connection
// per master, see shard.go), the wake-ups of waiters (a release's
// message, a hand-off to a queued waiter, a reconnect, a topology
// change), the delivery of hand-offs by handoffID, and the liveness probe
// that replaces a connection that stopped hearing its channels.
//
// It knows nothing of locks: the Client gives it what it needs in a
// Config, and keeps the waiting loop that sleeps on a Waiter.
package notify

import (
	"context"
	"crypto/sha1"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config is what a Notifier takes from its Client.
type Config struct {
	Redis redis.UniversalClient
	// Own is the Client's hand-off channel: a release script publishes
	// handoffID of a queued waiter's token on it when it hands the lock
	// to that waiter.
	Own string
	// Off: no waiter subscribes its key's wake-up channel (a Ring, which
	// cannot hold one subscription for channels on different shards, or
	// a Client told not to use pub/sub): those waiters rely on their
	// retries alone.
	Off    bool
	Logger *slog.Logger
	// Closing is closed when the Client starts closing: a reader backing
	// off before it redials stops then.
	Closing <-chan struct{}
	// Closed is the error registering a waiter returns after Close.
	Closed error
	// Refused returns the error waiting calls return if err is Redis
	// refusing a SUBSCRIBE by ACL, and nil for any other error.
	Refused func(err error) error
	// Redialed is called after a stale connection was replaced.
	Redialed func()
	// IsToken reports whether a hand-off message has the shape of a
	// token (the message of releases by older versions).
	IsToken func(string) bool
	// Plain keeps hand-offs on plain pub/sub on a Cluster (tests and
	// benchmarks compare the two).
	Plain bool
}

// Notifier multiplexes every waiter of a Client over ONE pub/sub
// connection. A waiter subscribes to its key's wake-up channel (waiting for
// Redis to confirm, so no release can slip between the subscription and
// the next attempt), and a release script's PUBLISH wakes one local waiter
// of that key: only one can win, and the rest stay parked until the next
// release instead of stampeding.
//
// No caller ever sends on the pub/sub connection itself: SUBSCRIBE and
// UNSUBSCRIBE go through a queue that one goroutine sends, in order,
// outside mu. Sending waits for the connection, and while it is redialled
// (after a reset, with the server stalled) that can take longer than any
// caller's context: a waiter only waits for the confirmation, bounded by
// its context, and no waiter waits for another's subscription.
type Notifier struct {
	cfg Config
	// ctx ends the pub/sub connection's commands when the Client closes.
	ctx    context.Context
	cancel context.CancelFunc
	// own is cfg.Own, the Client's hand-off channel.
	own string
	// sharded: Redis Cluster, whose hand-offs and release messages go by
	// sharded pub/sub (see shard.go).
	sharded bool

	mu sync.Mutex // guards every field below
	ps *redis.PubSub
	// ownConfirmed is closed when Redis confirmed the subscription to own
	// (nil: not subscribed yet).
	ownConfirmed chan struct{}
	// grants maps handoffKey(token) of a queued waiter to the waiter.
	grants map[[sha1.Size]byte]*Waiter
	// chans maps a channel to its local waiters, oldest first.
	chans map[string]*chanWaiters
	// pending maps a channel to the confirmations its SUBSCRIBE commands
	// still await, in the order they were sent on the one connection.
	pending map[string][]chan struct{}
	// ops are the SUBSCRIBE and UNSUBSCRIBE commands not sent yet, in
	// order; sending: a goroutine is sending them.
	ops     []psOp
	sending bool
	closed  bool
	// refused: Redis refused a SUBSCRIBE by ACL (see refuse); waiting
	// calls return it.
	refused error
	loopWG  sync.WaitGroup // the reader, the sender and a probe's PUBLISH

	// The liveness probe (see Notifier), driven by the reader.
	probeEvery  time.Duration // between probes while waiters are registered; 0: no probes
	probeWithin time.Duration // how long after Redis's reply a probe must arrive
	probeSeq    uint64
	probeWant   string    // the payload of the probe in flight ("": none)
	probeAcked  time.Time // when Redis replied to its PUBLISH (zero: not yet)
	lastProbe   time.Time // when the last probe was sent
	lastRedial  time.Time
	probeSoon   bool // a waiter saw a symptom: probe at the next tick

	// Sharded pub/sub (shard.go): the channels wanted, the connection to
	// each master, the slot channel names found, the back-off of
	// replacing connections that keep failing, and whether any queued
	// waiter ever registered (see OwnSubscribed).
	ssubs        map[string]*ssub
	sconns       map[string]*sconn
	slotNames    map[int]string
	shardBackoff time.Duration
	shardUsed    bool
}

// The liveness probe's defaults: a subscription that stops hearing its
// channels is noticed within about probeEvery + probeWithin + two reader
// ticks (under 6 s), and costs one PUBLISH every 3 s per Client while it
// has waiters.
const (
	pubsubProbeEvery  = 3 * time.Second
	pubsubProbeWithin = 2 * time.Second
)

// ProbePrefix starts every probe payload: a ':' is in no token and no hex
// hand-off ID, so a probe is never taken for a hand-off (see handedOff).
const ProbePrefix = "probe:"

// psOp is a SUBSCRIBE (confirmed != nil) or UNSUBSCRIBE of channel.
type psOp struct {
	channel   string
	confirmed chan struct{}
}

type chanWaiters struct {
	confirmed chan struct{} // closed when Redis confirmed our SUBSCRIBE
	waiters   []*Waiter
}

// New returns the notifier of a Client. It opens no connection: the
// first waiter does.
func New(cfg Config) *Notifier {
	ctx, cancel := context.WithCancel(context.Background())
	_, cluster := cfg.Redis.(*redis.ClusterClient)
	return &Notifier{
		cfg: cfg, own: cfg.Own, ctx: ctx, cancel: cancel,
		sharded: cluster && !cfg.Off && !cfg.Plain,
		chans:   map[string]*chanWaiters{}, pending: map[string][]chan struct{}{},
		grants:     map[[sha1.Size]byte]*Waiter{},
		probeEvery: pubsubProbeEvery, probeWithin: pubsubProbeWithin,
		ssubs: map[string]*ssub{}, sconns: map[string]*sconn{}, slotNames: map[int]string{},
	}
}

// Own returns the Client's hand-off channel.
func (n *Notifier) Own() string { return n.own }

// SetProbe sets the liveness probe (tests): a probe every every (0: none)
// while waiters are registered, due back within within of Redis's reply.
func (n *Notifier) SetProbe(every, within time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.probeEvery, n.probeWithin = every, within
}

// ensurePubSubLocked starts the shared connection and its reader.
func (n *Notifier) ensurePubSubLocked() {
	if n.ps == nil {
		n.ps = n.cfg.Redis.Subscribe(n.ctx)
		n.loopWG.Add(1)
		go n.loop(n.ps)
	}
}

// subscribeLocked queues SUBSCRIBE channel and returns the channel closed
// when Redis confirms it. The confirmation is awaited from now on: the
// reader needs n.mu, which the caller holds, and the command is sent
// after this (sendOps).
func (n *Notifier) subscribeLocked(channel string) chan struct{} {
	n.ensurePubSubLocked()
	confirmed := make(chan struct{})
	n.pending[channel] = append(n.pending[channel], confirmed)
	n.queueLocked(psOp{channel: channel, confirmed: confirmed})
	return confirmed
}

// queueLocked queues op for the sender, starting it if it is not running.
func (n *Notifier) queueLocked(op psOp) {
	n.ops = append(n.ops, op)
	if !n.sending {
		n.sending = true
		n.loopWG.Add(1)
		go n.sendOps()
	}
}

// sendOps sends the queued commands, in order, without holding n.mu, and
// exits when the queue is empty (or the Client closed).
func (n *Notifier) sendOps() {
	defer n.loopWG.Done()
	for {
		n.mu.Lock()
		if len(n.ops) == 0 || n.closed {
			n.ops, n.sending = nil, false
			n.mu.Unlock()
			return
		}
		op := n.ops[0]
		n.ops = n.ops[1:]
		ps := n.ps
		n.mu.Unlock()
		if op.confirmed == nil {
			_ = ps.Unsubscribe(n.ctx, op.channel)
			continue
		}
		if err := ps.Subscribe(n.ctx, op.channel); err != nil {
			n.unconfirmed(op)
		}
	}
}

// unconfirmed stops waiting for the confirmation of a SUBSCRIBE that
// failed: its waiters fall back on their retries (go-redis subscribes
// the channel again when it reconnects).
func (n *Notifier) unconfirmed(op psOp) {
	n.mu.Lock()
	defer n.mu.Unlock()
	q := n.pending[op.channel]
	for i, ch := range q {
		if ch == op.confirmed {
			close(ch)
			n.pending[op.channel] = append(q[:i:i], q[i+1:]...)
			if len(n.pending[op.channel]) == 0 {
				delete(n.pending, op.channel)
			}
			return
		}
	}
}

// awaitConfirm waits for a subscription, at most a second: an unconfirmed
// one still works once Redis processes it, and the fallback retry covers
// the gap.
func awaitConfirm(ctx context.Context, confirmed <-chan struct{}) {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-confirmed:
	case <-t.C:
	case <-ctx.Done():
	}
}

func (n *Notifier) confirm(channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	q := n.pending[channel]
	if len(q) == 0 {
		return
	}
	close(q[0])
	if len(q) == 1 {
		delete(n.pending, channel)
	} else {
		n.pending[channel] = q[1:]
	}
}

// Close ends the pub/sub connection and waits for the notifier's
// goroutines: from then on, registering a waiter returns Config.Closed.
func (n *Notifier) Close() {
	n.mu.Lock()
	n.closed = true
	ps := n.ps
	for _, q := range n.pending {
		for _, ch := range q {
			close(ch)
		}
	}
	n.pending = map[string][]chan struct{}{}
	shardPS := n.closeShardsLocked()
	n.mu.Unlock()
	n.cancel() // a redial or a command in progress gives up
	if ps != nil {
		_ = ps.Close()
	}
	for _, ps := range shardPS {
		_ = ps.Close()
	}
	n.loopWG.Wait()
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
