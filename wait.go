package dlock

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// notifier multiplexes every waiter of a Client over ONE pub/sub
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
type notifier struct {
	c *Client
	// ctx ends the pub/sub connection's commands when the Client closes.
	ctx    context.Context
	cancel context.CancelFunc
	// own is this Client's hand-off channel: the release script publishes
	// handoffID of a queued waiter's token on it when it hands the lock to
	// that waiter.
	own string

	mu sync.Mutex // guards every field below
	ps *redis.PubSub
	// ownConfirmed is closed when Redis confirmed the subscription to own
	// (nil: not subscribed yet).
	ownConfirmed chan struct{}
	// grants maps handoffKey(token) of a queued waiter to the waiter.
	grants map[[sha1.Size]byte]*waiter
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
	refused *PermissionError
	loopWG  sync.WaitGroup // the reader, the sender and a probe's PUBLISH

	// The liveness probe (see notifier), driven by the reader.
	probeEvery  time.Duration // between probes while waiters are registered; 0: no probes
	probeWithin time.Duration // how long after Redis's reply a probe must arrive
	probeSeq    uint64
	probeWant   string    // the payload of the probe in flight ("": none)
	probeAcked  time.Time // when Redis replied to its PUBLISH (zero: not yet)
	lastProbe   time.Time // when the last probe was sent
	lastRedial  time.Time
	probeSoon   bool // a waiter saw a symptom: probe at the next tick
}

// The liveness probe's defaults: a subscription that stops hearing its
// channels is noticed within about probeEvery + probeWithin + two reader
// ticks (under 6 s), and costs one PUBLISH every 3 s per Client while it
// has waiters.
const (
	pubsubProbeEvery  = 3 * time.Second
	pubsubProbeWithin = 2 * time.Second
)

// probePrefix starts every probe payload: a ':' is in no token and no hex
// hand-off ID, so a probe is never taken for a hand-off (see handedOff).
const probePrefix = "probe:"

// psOp is a SUBSCRIBE (confirmed != nil) or UNSUBSCRIBE of channel.
type psOp struct {
	channel   string
	confirmed chan struct{}
}

type chanWaiters struct {
	confirmed chan struct{} // closed when Redis confirmed our SUBSCRIBE
	waiters   []*waiter
}

// waiter is one blocked call (embedded in its waitCall) or an election
// feed. wake has room for one signal, so a wake-up sent while the waiter
// is busy trying is not lost. The notifier, the watchdog's retry heap and
// Close all signal the same channel: a waiter selects on it and its
// context only.
type waiter struct {
	// channel is the waiter's token (queued) or the channel it listens on.
	channel string
	wake    chan struct{}
	// all: every message on channel wakes this waiter (an election feed),
	// not just one waiter of the channel.
	all bool
	// handed: the notifier woke this waiter (a hand-off, a release
	// message, or a reconnect), not its retry time.
	handed atomic.Bool
	// granted: the wake-up was a hand-off message for this queued
	// waiter's token (not a reconnect, which wakes every waiter).
	granted atomic.Bool
}

// signal wakes w, unless a wake-up is pending already; it reports whether
// this one was queued.
func (w *waiter) signal() bool {
	select {
	case w.wake <- struct{}{}:
		return true
	default:
		return false
	}
}

func newNotifier(c *Client) *notifier {
	ctx, cancel := context.WithCancel(context.Background())
	return &notifier{
		c: c, own: c.opts.Prefix + ":client:" + newToken(), ctx: ctx, cancel: cancel,
		chans: map[string]*chanWaiters{}, pending: map[string][]chan struct{}{},
		grants:     map[[sha1.Size]byte]*waiter{},
		probeEvery: pubsubProbeEvery, probeWithin: pubsubProbeWithin,
	}
}

// ensurePubSubLocked starts the shared connection and its reader.
func (n *notifier) ensurePubSubLocked() {
	if n.ps == nil {
		n.ps = n.c.rdb.Subscribe(n.ctx)
		n.loopWG.Add(1)
		go n.loop(n.ps)
	}
}

// subscribeLocked queues SUBSCRIBE channel and returns the channel closed
// when Redis confirms it. The confirmation is awaited from now on: the
// reader needs n.mu, which the caller holds, and the command is sent
// after this (sendOps).
func (n *notifier) subscribeLocked(channel string) chan struct{} {
	n.ensurePubSubLocked()
	confirmed := make(chan struct{})
	n.pending[channel] = append(n.pending[channel], confirmed)
	n.queueLocked(psOp{channel: channel, confirmed: confirmed})
	return confirmed
}

// queueLocked queues op for the sender, starting it if it is not running.
func (n *notifier) queueLocked(op psOp) {
	n.ops = append(n.ops, op)
	if !n.sending {
		n.sending = true
		n.loopWG.Add(1)
		go n.sendOps()
	}
}

// sendOps sends the queued commands, in order, without holding n.mu, and
// exits when the queue is empty (or the Client closed).
func (n *notifier) sendOps() {
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
func (n *notifier) unconfirmed(op psOp) {
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

// queueWaiter registers w, a queued waiter whose channel is its token,
// subscribing the Client's own hand-off channel on first use (it stays
// subscribed until Close). It must be called before the waiter enqueues,
// so no hand-off is published before anyone listens. If Redis refused a
// subscription of this Client (see refuse), it registers nothing and
// returns that refusal.
func (n *notifier) queueWaiter(ctx context.Context, w *waiter) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return ErrClosed
	}
	if n.refused != nil {
		n.mu.Unlock()
		return n.refused
	}
	if n.ownConfirmed == nil {
		n.ownConfirmed = n.subscribeLocked(n.own)
	}
	confirmed := n.ownConfirmed
	n.grants[handoffKey(w.channel)] = w
	n.mu.Unlock()
	awaitConfirm(ctx, confirmed)
	if err := n.refusal(); err != nil {
		n.dropQueueWaiter(w)
		return err
	}
	return nil
}

// refusal returns Redis's refusal of a SUBSCRIBE of this Client, if any
// (see refuse).
func (n *notifier) refusal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.refused == nil {
		return nil // not a typed nil
	}
	return n.refused
}

// refuse records that Redis refused a SUBSCRIBE on the pub/sub connection
// by ACL (the Redis user has no right to dlock's channels): no
// confirmation will come, so none is awaited any more, and every waiter is
// woken to see it. A waiting call then ends with ErrNoPermission rather
// than wait on its retry timer alone; an election's observers keep
// polling. The refusal stays for the Client's life (Options.NoPubSub is
// the way to wait without pub/sub). The reply does not say which channel
// was refused: all of them share Options.Prefix, and an ACL that grants
// some of them only is not supported.
func (n *notifier) refuse(err *PermissionError) {
	n.mu.Lock()
	first := n.refused == nil
	if first {
		n.refused = err
	}
	for _, q := range n.pending {
		for _, ch := range q {
			close(ch)
		}
	}
	n.pending = map[string][]chan struct{}{}
	n.probeWant = ""
	n.mu.Unlock()
	if first {
		n.c.opts.Logger.Warn("dlock: Redis refused this Client's pub/sub subscription by ACL: waiting calls fail with ErrNoPermission (grant the channels, or set Options.NoPubSub)", "err", err)
	}
	n.wakeAll()
}

// ownSubscribed reports whether the hand-off channel has been subscribed.
func (n *notifier) ownSubscribed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ownConfirmed != nil
}

// retoken moves the queued waiter of token old, if any, to token new.
func (n *notifier) retoken(old, new string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w := n.grants[handoffKey(old)]; w != nil {
		delete(n.grants, handoffKey(old))
		w.channel = new
		n.grants[handoffKey(new)] = w
	}
}

func (n *notifier) dropQueueWaiter(w *waiter) {
	n.mu.Lock()
	delete(n.grants, handoffKey(w.channel))
	n.mu.Unlock()
}

// handoffID is what a hand-off publishes for the waiter token (q_notify in
// internal/lualib/queue.lua): its SHA1 in hex. It identifies the waiter to its
// Client, and is no credential: only the token releases a lock.
func handoffID(token string) string {
	h := handoffKey(token)
	return hex.EncodeToString(h[:])
}

// handoffKey is handoffID undecoded: the key of a queued waiter in the
// notifier (20 bytes in the map, no string per waiter).
func handoffKey(token string) [sha1.Size]byte {
	return sha1.Sum([]byte(token))
}

// handedOff wakes the queued waiter a release's hand-off message names:
// handoffID of its token, or the token itself (the message of releases by
// an older version, during a rolling upgrade).
func (n *notifier) handedOff(msg string) {
	var id [sha1.Size]byte
	isID := len(msg) == hex.EncodedLen(sha1.Size)
	if isID {
		_, err := hex.Decode(id[:], []byte(msg))
		isID = err == nil
	}
	n.mu.Lock()
	var w *waiter
	if isID {
		w = n.grants[id]
	}
	if w == nil && isToken(msg) {
		w = n.grants[handoffKey(msg)]
	}
	if w != nil {
		w.granted.Store(true)
		w.handed.Store(true)
	}
	n.mu.Unlock()
	if w != nil {
		w.signal()
	}
}

// watch registers a waiter that every message on channel wakes (see
// subscribe), sharing the Client's one pub/sub connection.
func (n *notifier) watch(ctx context.Context, channel string) (*waiter, error) {
	return n.subscribeWaiter(ctx, &waiter{channel: channel, wake: make(chan struct{}, 1), all: true})
}

// subscribeWaiter registers w on its channel, a key's wake-up channel
// (waiters that do not queue: Barging, or a protocol without a queue), and
// waits for Redis to confirm the subscription.
func (n *notifier) subscribeWaiter(ctx context.Context, w *waiter) (*waiter, error) {
	channel := w.channel
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, ErrClosed
	}
	if n.c.ring || n.c.opts.NoPubSub {
		// A Ring cannot hold one subscription for channels on different
		// shards: Ring waiters rely on the fallback retry alone, as do
		// those of a Client told not to use pub/sub.
		n.mu.Unlock()
		return w, nil
	}
	cw := n.chans[channel]
	if cw == nil {
		cw = &chanWaiters{confirmed: n.subscribeLocked(channel)}
		n.chans[channel] = cw
	}
	cw.waiters = append(cw.waiters, w)
	confirmed := cw.confirmed
	n.mu.Unlock()
	awaitConfirm(ctx, confirmed)
	return w, nil
}

// unsubscribe removes w; the last waiter of a channel unsubscribes it.
func (n *notifier) unsubscribe(w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	cw := n.chans[w.channel]
	if cw == nil {
		return
	}
	for i, x := range cw.waiters {
		if x == w {
			cw.waiters = append(cw.waiters[:i], cw.waiters[i+1:]...)
			break
		}
	}
	if len(cw.waiters) > 0 {
		return
	}
	delete(n.chans, w.channel)
	if n.ps != nil && !n.closed {
		n.queueLocked(psOp{channel: w.channel})
	}
}

// handoff passes a wake-up that w received but did not use (it left
// without acquiring) to the next local waiter of the same channel.
func (n *notifier) handoff(w *waiter) {
	select {
	case <-w.wake:
	default:
		return
	}
	n.wakeOne(w.channel, w)
}

// wakeOne wakes the oldest waiter on channel other than except.
func (n *notifier) wakeOne(channel string, except *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	cw := n.chans[channel]
	if cw == nil {
		return
	}
	// Every waiter that wants all messages gets it; of the others, the
	// oldest whose buffer is empty takes it. A full buffer already holds a
	// pending wake-up, so nothing is lost.
	woken := false
	for _, w := range cw.waiters {
		if w == except || woken && !w.all {
			continue
		}
		w.handed.Store(true)
		if w.signal() {
			woken = woken || !w.all
		}
	}
}

func (n *notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, w := range n.grants {
		w.handed.Store(true)
		w.signal()
	}
	for _, cw := range n.chans {
		for _, w := range cw.waiters {
			w.handed.Store(true)
			w.signal()
		}
	}
}

func (n *notifier) confirm(channel string) {
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

// loop reads the pub/sub connection until Close. After a connection error
// go-redis reconnects and re-subscribes; messages may have been missed
// meanwhile, so every waiter is woken to try again. Between messages it
// runs the liveness probe (see notifier) and replaces a stale connection.
func (n *notifier) loop(ps *redis.PubSub) {
	defer n.loopWG.Done()
	ctx := n.ctx
	backoff := 50 * time.Millisecond
	down := false // the connection failed and has not delivered since
	lastRead := time.Now()
	// After a redial: the confirmations of its subscriptions, and when it
	// was made; every waiter is woken once they all came (or probeWithin).
	var resubscribed []chan struct{}
	var redialed time.Time
	for {
		if len(resubscribed) > 0 {
			for len(resubscribed) > 0 && isClosed(resubscribed[0]) {
				resubscribed = resubscribed[1:]
			}
			if len(resubscribed) == 0 || time.Since(redialed) >= n.within() {
				resubscribed = nil
				n.wakeAll()
			}
		}
		msg, err := ps.ReceiveTimeout(ctx, n.tick(down || len(resubscribed) > 0))
		if err != nil {
			n.mu.Lock()
			closed := n.closed
			n.mu.Unlock()
			if closed {
				return
			}
			if pe := permissionOf(err); pe != nil {
				// A refused SUBSCRIBE: the connection is fine.
				n.refuse(pe)
				continue
			}
			if isTimeout(err) {
				if !down && len(resubscribed) == 0 && n.probeStep(time.Now()) {
					next, awaited := n.redial(ps)
					if next == nil {
						return // closed
					}
					ps, resubscribed, redialed = next, awaited, time.Now()
					lastRead = redialed
					continue
				}
				if down || time.Since(lastRead) >= 30*time.Second {
					// Idle, or reconnected with nothing heard yet: check
					// the connection is alive (its PONG ends down); a dead
					// one errors on the next receive and is redialled.
					lastRead = time.Now()
					_ = ps.Ping(ctx)
				}
				continue
			}
			if !down {
				// Messages may be lost from now on: waiters rely on
				// their retries until the connection is back.
				n.c.opts.Logger.Debug("dlock: pub/sub receive failed; waking all waiters", "err", err)
				down = true
				n.dropProbe()
				n.wakeAll()
			}
			select { // redial with back-off, at most every 500ms
			case <-time.After(backoff):
			case <-n.c.closing:
				return
			}
			backoff = min(2*backoff, 500*time.Millisecond)
			continue
		}
		lastRead = time.Now()
		if down {
			// Reconnected and re-subscribed: anything published meanwhile
			// was missed, so every waiter tries again now.
			down, backoff = false, 50*time.Millisecond
			n.wakeAll()
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				n.confirm(m.Channel)
			}
		case *redis.Message:
			switch {
			case m.Channel != n.own:
				n.wakeOne(m.Channel, nil)
			case strings.HasPrefix(m.Payload, probePrefix):
				n.probeArrived(m.Payload)
			default:
				probe.Point(probe.HandoffReceived, "")
				n.handedOff(m.Payload)
			}
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// tick is how long the reader waits for a message before it looks at the
// probe again: a quarter of the probe's shorter period while waiters are
// registered or a redial is confirmed, probeEvery otherwise, 30 s with the
// probe off (as for an idle connection). busy: the connection is down or
// being resubscribed.
func (n *notifier) tick(busy bool) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.probeEvery <= 0 {
		return 30 * time.Second
	}
	if busy || n.probeWant != "" || n.probeSoon || len(n.grants) > 0 || len(n.chans) > 0 {
		return max(min(n.probeEvery, n.probeWithin)/4, time.Millisecond)
	}
	return n.probeEvery
}

func (n *notifier) within() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.probeWithinLocked()
}

func (n *notifier) probeWithinLocked() time.Duration {
	return max(n.probeWithin, time.Millisecond)
}

// probeStep runs the probe's schedule at now: it reports whether the probe
// in flight is overdue (the subscription is stale), or sends the next one
// if it is due and waiters are registered.
func (n *notifier) probeStep(now time.Time) (stale bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.probeEvery <= 0 || n.refused != nil {
		return false
	}
	if n.probeWant != "" {
		if n.probeAcked.IsZero() || now.Sub(n.probeAcked) < n.probeWithin {
			return false // its PUBLISH is in flight, or it may still come
		}
		n.probeWant = ""
		// At most one redial per probeEvery, whatever asked for probes.
		return now.Sub(n.lastRedial) >= n.probeEvery
	}
	if len(n.grants) == 0 && len(n.chans) == 0 {
		n.probeSoon = false
		return false
	}
	if !n.probeSoon && now.Sub(n.lastProbe) < n.probeEvery {
		return false
	}
	if n.ownConfirmed == nil {
		// Only listening waiters so far: the probe needs the own channel.
		n.ownConfirmed = n.subscribeLocked(n.own)
		return false
	}
	if !isClosed(n.ownConfirmed) {
		return false // probe once the subscription is confirmed
	}
	n.probeSoon = false
	n.lastProbe = now
	n.probeSeq++
	payload := probePrefix + strconv.FormatUint(n.probeSeq, 10)
	n.probeWant, n.probeAcked = payload, time.Time{}
	n.loopWG.Add(1)
	go n.sendProbe(payload)
	return false
}

// sendProbe PUBLISHes a probe through the command path and records when
// Redis replied. An error drops the probe: it says Redis is down or slow,
// not that the subscription is stale, and the connection's own error path
// covers a Redis that is down.
func (n *notifier) sendProbe(payload string) {
	defer n.loopWG.Done()
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	err := n.c.rdb.Publish(ctx, n.own, payload).Err()
	if err != nil {
		n.c.opts.Logger.Debug("dlock: pub/sub probe not sent", "err", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.probeWant != payload {
		return // arrived before the reply, or dropped
	}
	if err != nil {
		n.probeWant = ""
		return
	}
	n.probeAcked = time.Now()
}

// probeArrived records that a probe came back on the subscription.
func (n *notifier) probeArrived(payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if payload == n.probeWant {
		n.probeWant = ""
	}
}

// dropProbe forgets the probe in flight (the connection failed: its own
// error path takes over).
func (n *notifier) dropProbe() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.probeWant = ""
}

// suspect asks for a probe at the reader's next tick: a waiter acquired on
// its retry before the holder's TTL ran out, without the wake-up the
// release should have sent (a hand-off whose message never came, or a
// release by a client that publishes nothing).
func (n *notifier) suspect() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.probeEvery > 0 && n.probeWant == "" && time.Since(n.lastProbe) >= n.probeWithin {
		n.probeSoon = true
	}
}

// redial replaces the stale connection old: a new one subscribes the own
// channel (if it was) and every channel with listeners, through the
// sender's queue so that later (UN)SUBSCRIBEs follow in order. It returns
// the new connection (nil: the Client closed) and the confirmations to
// await before waking every waiter. Confirmations still awaited on old
// are given up (those waiters are woken after the redial anyway).
func (n *notifier) redial(old *redis.PubSub) (*redis.PubSub, []chan struct{}) {
	ps := n.c.rdb.Subscribe(n.ctx) // dials on first use
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		_ = ps.Close()
		return nil, nil
	}
	n.ps = ps
	n.lastRedial = time.Now()
	for _, q := range n.pending {
		for _, ch := range q {
			close(ch)
		}
	}
	n.pending = map[string][]chan struct{}{}
	var awaited []chan struct{}
	if n.ownConfirmed != nil {
		n.ownConfirmed = n.subscribeLocked(n.own)
		awaited = append(awaited, n.ownConfirmed)
	}
	for ch, cw := range n.chans {
		cw.confirmed = n.subscribeLocked(ch)
		awaited = append(awaited, cw.confirmed)
	}
	waiters := len(n.grants)
	for _, cw := range n.chans {
		waiters += len(cw.waiters)
	}
	n.mu.Unlock()
	_ = old.Close()
	n.c.stats.pubsubRedials.Add(1)
	n.c.evict.stale() // a failover may have brought a new master: check its policy
	n.c.opts.Logger.Warn("dlock: pub/sub connection missed its liveness probe: it no longer hears this Client's messages (a failover can leave it on a node nobody publishes to); replacing it and waking every waiter",
		"channels", len(awaited), "waiters", waiters)
	return ps, awaited
}

func isTimeout(err error) bool {
	t, ok := err.(interface{ Timeout() bool })
	return ok && t.Timeout()
}

func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	ps := n.ps
	for _, q := range n.pending {
		for _, ch := range q {
			close(ch)
		}
	}
	n.pending = map[string][]chan struct{}{}
	n.mu.Unlock()
	n.cancel() // a redial or a command in progress gives up
	if ps != nil {
		_ = ps.Close()
	}
	n.loopWG.Wait()
}

// wait runs attempts of a until one acquires, fails, or ctx ends: the one
// waiting loop every primitive uses. An uncontended acquire costs one
// round trip.
//
// A queued waiter (a.queued: its attempts keep it in the key's FIFO queue,
// and a release hands it the lock by publishing handoffID of its token on
// the Client's own channel) registers for its hand-off before its first
// attempt, which enqueues it if the key is held, then sleeps until the
// hand-off arrives or its retry is due: every third of its queue lease (the
// retry refreshes the lease) or when the holder's TTL runs out, whichever
// is first. Its first attempt is made with first, the ones after it with
// a.retry(). Until the Client has subscribed its hand-off channel it first
// makes one attempt with try, which does not enqueue, so a Client whose
// locks are never contended never opens a pub/sub connection. Any other
// waiter makes its first attempt, subscribes to the key's wake-up channel,
// and sleeps until a release message or its retry.
//
// The retry times of every blocked call are kept by the watchdog's one
// goroutine and timer (watchdog.sleep), which wakes a call on the same
// channel as the notifier: a sleeping call has no timer, no goroutine of
// its own, and waits on that channel and ctx.
func (c *Client) wait(ctx context.Context, a *waitCall, first, try protocol.Protocol) (waited bool, err error) {
	w := &a.waiter
	if a.queued {
		if try != nil && !c.notify.ownSubscribed() {
			if ok, _, err := a.attempt(ctx, try); ok || err != nil {
				return false, err
			}
		}
	}
	// Made here, not with a: a call granted by the attempt above never
	// needs one. Nothing can signal w before it is registered below.
	w.wake = make(chan struct{}, 1)
	if a.queued {
		w.channel = a.token
		if err = c.notify.queueWaiter(ctx, w); err != nil {
			return false, err // nothing was sent for this token yet
		}
		defer c.notify.dropQueueWaiter(w)
	}
	if ctx.Err() != nil {
		// Done before anything was sent for this token: nothing to
		// withdraw.
		return false, ctxDone(ctx)
	}
	// An attempt that fails withdraws what it may have done itself (see
	// Client.obtain).
	ok, ttl, err := a.attempt(ctx, first)
	if err != nil {
		// The first attempt's error ends the call: withdraw whatever it
		// may have left queued or held (a multi-slot waiter keeps the
		// slots it took before the one that failed). Token-checked, so
		// harmless if there is nothing.
		a.withdraw()
	}
	if ok || err != nil {
		return false, err
	}
	waited = true
	c.stats.waits.Add(1)
	c.stats.waiting.Add(1)
	defer c.stats.waiting.Add(-1)
	if !a.queued {
		w.channel = a.keys.Wake
		if _, err = c.notify.subscribeWaiter(ctx, w); err != nil {
			return waited, err
		}
		defer c.notify.unsubscribe(w)
		if err = c.notify.refusal(); err != nil {
			return waited, err // this waiter never queues: nothing to withdraw
		}
		// Subscribed now: try again before sleeping, since the holder may
		// have released between the first attempt and the subscription.
		if ok, ttl, err = a.attempt(ctx, a.retry()); ok || err != nil {
			if !ok {
				c.notify.handoff(w)
			}
			return waited, err
		}
	}
	defer c.wd.unsleep(a)
	next := c.retryAfter(ttl, a.queued)
	// early: the next retry comes before the holder's TTL runs out.
	early := c.retryEarly(ttl, a.queued)
	// A Redis error while waiting (a blip, a failover) does not end the
	// wait: the caller asked to wait until ctx ends. The attempts back off
	// from 50ms to RetryInterval; the last error is reported if ctx ends.
	var redisErr error
	backoff := 50 * time.Millisecond
	for {
		c.wd.sleep(a, next)
		select {
		case <-w.wake:
		case <-ctx.Done():
			c.giveUp(a)
			return waited, errors.Join(ctxDone(ctx), redisErr)
		}
		// No retry wake-up while attempting: the next is armed after it.
		c.wd.unsleep(a)
		if c.closed() {
			c.giveUp(a)
			return waited, ErrClosed
		}
		if err = c.notify.refusal(); err != nil {
			c.giveUp(a)
			return waited, err
		}
		woken := w.handed.Swap(false)
		// Only a hand-off message counts, not the wake-up of a dropped or
		// replaced pub/sub connection.
		if w.granted.Swap(false) && a.queued {
			c.stats.handoffs.Add(1)
			probe.Point(probe.BeforeConfirm, a.keys.Lock)
		}
		if ok, ttl, err = a.attempt(ctx, a.retry()); ok {
			if !woken && early {
				// Acquired on a retry made before the holder's TTL ran
				// out: the release's message should have woken this
				// waiter. Check the subscription now.
				c.notify.suspect()
			}
			return waited, nil
		}
		next = c.retryAfter(ttl, a.queued)
		early = c.retryEarly(ttl, a.queued)
		switch {
		case err == nil:
			redisErr, backoff = nil, 50*time.Millisecond
		case errors.Is(err, ErrUnavailable) && ctx.Err() == nil:
			redisErr, next, early = err, backoff, false
			backoff = min(2*backoff, c.opts.RetryInterval)
			c.opts.Logger.Debug("dlock: redis error while waiting; retrying", "channel", a.keys.Wake, "err", err)
		case errors.Is(err, ErrContextDone):
			c.giveUp(a)
			return waited, errors.Join(err, redisErr)
		default:
			c.giveUp(a)
			return waited, err
		}
	}
}

// giveUp is how a waiter leaves without the lock: a queued one withdraws
// from the queue; a listening one passes an unused wake-up on.
func (c *Client) giveUp(a *waitCall) {
	if a.queued {
		a.withdraw()
	} else {
		c.notify.handoff(&a.waiter)
	}
}

// retryEarly reports whether the fallback retry after an attempt that
// found the holder's TTL at holderTTL comes before that TTL runs out: a
// retry that then acquires found the lock released early, and the release
// should have woken the waiter first.
func (c *Client) retryEarly(holderTTL time.Duration, queued bool) bool {
	d := c.opts.RetryInterval
	if queued {
		d = min(d, c.opts.WaiterLease/3)
	}
	return holderTTL > d
}

// retryAfter is the fallback wait of a blocked caller: the holder's
// remaining TTL, at most RetryInterval (and, queued, at most a third of the
// queue lease, which the retry refreshes), plus up to 10% (at most 10ms) of
// jitter so waiters of different clients do not retry in lockstep.
func (c *Client) retryAfter(holderTTL time.Duration, queued bool) time.Duration {
	d := c.opts.RetryInterval
	if queued {
		d = min(d, c.opts.WaiterLease/3)
	}
	if holderTTL > 0 && holderTTL < d {
		d = holderTTL
	}
	j := min(d/10, 10*time.Millisecond)
	if j > 0 {
		d += rand.N(j)
	}
	return max(d, time.Millisecond)
}
