package notify

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"sync/atomic"
)

// Waiter is one blocked call (embedded in the engine's waitCall) or an election
// feed. Wake has room for one signal, so a wake-up sent while the waiter
// is busy trying is not lost. The notifier, the watchdog's retry heap and
// Close all signal the same channel: a waiter selects on it and its
// context only.
type Waiter struct {
	// Channel is the waiter's token (queued) or the channel it listens
	// on, set before the waiter is registered.
	Channel string
	// Wake is made, with room for one signal, before the waiter is
	// registered.
	Wake chan struct{}
	// all: every message on channel wakes this waiter (an election feed),
	// not just one waiter of the channel.
	all bool
	// handed: the notifier woke this waiter (a hand-off, a release
	// message, or a reconnect), not its retry time.
	handed atomic.Bool
	// granted: the wake-up was a hand-off message for this queued
	// waiter's token (not a reconnect, which wakes every waiter).
	granted atomic.Bool
	// Slot is the Cluster slot of the waiter's key, set before a queued
	// waiter is registered: on sharded pub/sub its hand-off comes on the
	// Client's channel of that slot (HandoffChannel). A waiter that may
	// queue in several slots (a multi-key lock across slots) lists them
	// all in Slots instead.
	Slot  int
	Slots []int
	// Shardable: the key's release messages come by SPUBLISH on sharded
	// pub/sub (dlock's own protocols; not a foreign protocol's waiter,
	// whose releases PUBLISH). Set before a listening waiter subscribes.
	Shardable bool
	// shard: registered on sharded pub/sub.
	shard bool
}

// Signal wakes w, unless a wake-up is pending already; it reports whether
// this one was queued.
func (w *Waiter) Signal() bool {
	select {
	case w.Wake <- struct{}{}:
		return true
	default:
		return false
	}
}

// Woken reports, and clears, whether the notifier woke w since the last
// call (a hand-off, a release message, or a reconnect: not its retry
// time), and whether that was a hand-off message for this queued waiter's
// token (granted).
func (w *Waiter) Woken() (handed, granted bool) {
	return w.handed.Swap(false), w.granted.Swap(false)
}

// Queue registers w, a queued waiter whose channel is its token,
// subscribing the Client's own hand-off channel on first use (it stays
// subscribed until Close). It must be called before the waiter enqueues,
// so no hand-off is published before anyone listens. If Redis refused a
// subscription of this Client (see refuse), it registers nothing and
// returns that refusal.
func (n *Notifier) Queue(ctx context.Context, w *Waiter) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return n.cfg.Closed
	}
	if n.refused != nil {
		n.mu.Unlock()
		return n.refused
	}
	var confirmed chan struct{}
	if n.sharded {
		w.shard, n.shardUsed = true, true
		var subs []*ssub
		var fresh []bool
		for _, slot := range w.slots() {
			s, f := n.addShardLocked(n.slotChannelLocked(slot), slot, true, w)
			subs, fresh = append(subs, s), append(fresh, f)
		}
		n.grants[handoffKey(w.Channel)] = w
		n.mu.Unlock()
		for i, s := range subs {
			if fresh[i] {
				n.placeShard(ctx, s)
			}
		}
		for _, s := range subs[1:] {
			awaitConfirm(ctx, n.confirmedOf(s))
		}
		confirmed = n.confirmedOf(subs[0])
	} else {
		if n.ownConfirmed == nil {
			n.ownConfirmed = n.subscribeLocked(n.own)
		}
		confirmed = n.ownConfirmed
		n.grants[handoffKey(w.Channel)] = w
		n.mu.Unlock()
	}
	awaitConfirm(ctx, confirmed)
	if err := n.Refusal(); err != nil {
		n.Dequeue(w)
		return err
	}
	return nil
}

// Refusal returns Redis's refusal of a SUBSCRIBE of this Client, if any
// (see refuse).
func (n *Notifier) Refusal() error {
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
func (n *Notifier) refuse(err error) {
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
		n.cfg.Logger.Warn("dlock: Redis refused this Client's pub/sub subscription by ACL: waiting calls fail with ErrNoPermission (grant the channels, or set Options.NoPubSub)", "err", err)
	}
	n.wakeAll()
}

// OwnSubscribed reports whether the hand-off channel has been subscribed
// (on sharded pub/sub: whether a queued waiter ever registered).
func (n *Notifier) OwnSubscribed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ownConfirmed != nil || n.shardUsed
}

// Retoken moves the queued waiter of token old, if any, to token new.
func (n *Notifier) Retoken(old, new string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w := n.grants[handoffKey(old)]; w != nil {
		delete(n.grants, handoffKey(old))
		w.Channel = new
		n.grants[handoffKey(new)] = w
	}
}

// Dequeue removes w, a queued waiter that leaves (see Queue).
func (n *Notifier) Dequeue(w *Waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := handoffKey(w.Channel)
	if n.grants[k] != w {
		return
	}
	delete(n.grants, k)
	if w.shard {
		for _, slot := range w.slots() {
			n.dropShardLocked(n.slotChannelLocked(slot), true, w)
		}
	}
}

// slots returns the slots of a queued waiter's hand-off channels.
func (w *Waiter) slots() []int {
	if len(w.Slots) > 0 {
		return w.Slots
	}
	return []int{w.Slot}
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
func (n *Notifier) handedOff(msg string) {
	var id [sha1.Size]byte
	isID := len(msg) == hex.EncodedLen(sha1.Size)
	if isID {
		_, err := hex.Decode(id[:], []byte(msg))
		isID = err == nil
	}
	n.mu.Lock()
	var w *Waiter
	if isID {
		w = n.grants[id]
	}
	if w == nil && n.cfg.IsToken(msg) {
		w = n.grants[handoffKey(msg)]
	}
	if w != nil {
		w.granted.Store(true)
		w.handed.Store(true)
	}
	n.mu.Unlock()
	if w != nil {
		w.Signal()
	}
}

// Watch registers a waiter that every message on channel wakes (see
// Subscribe), sharing the Client's one pub/sub connection.
func (n *Notifier) Watch(ctx context.Context, channel string) (*Waiter, error) {
	w := &Waiter{Channel: channel, Wake: make(chan struct{}, 1), all: true}
	if err := n.Subscribe(ctx, w); err != nil {
		return nil, err
	}
	return w, nil
}

// Subscribe registers w on its channel, a key's wake-up channel
// (waiters that do not queue: Barging, or a protocol without a queue), and
// waits for Redis to confirm the subscription.
func (n *Notifier) Subscribe(ctx context.Context, w *Waiter) error {
	channel := w.Channel
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return n.cfg.Closed
	}
	if n.cfg.Off {
		// A Ring cannot hold one subscription for channels on different
		// shards: Ring waiters rely on the fallback retry alone, as do
		// those of a Client told not to use pub/sub.
		n.mu.Unlock()
		return nil
	}
	if n.sharded && w.Shardable && !w.all {
		w.shard = true
		s, fresh := n.addShardLocked(channel, keySlot(channel), false, w)
		n.mu.Unlock()
		if fresh {
			n.placeShard(ctx, s)
		}
		awaitConfirm(ctx, n.confirmedOf(s))
		return nil
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
	return nil
}

// Unsubscribe removes w; the last waiter of a channel unsubscribes it.
func (n *Notifier) Unsubscribe(w *Waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w.shard {
		n.dropShardLocked(w.Channel, false, w)
		return
	}
	cw := n.chans[w.Channel]
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
	delete(n.chans, w.Channel)
	if n.ps != nil && !n.closed {
		n.queueLocked(psOp{channel: w.Channel})
	}
}

// PassOn passes a wake-up that w received but did not use (it left
// without acquiring) to the next local waiter of the same channel.
func (n *Notifier) PassOn(w *Waiter) {
	select {
	case <-w.Wake:
	default:
		return
	}
	if w.shard {
		n.mu.Lock()
		if s := n.ssubs[w.Channel]; s != nil {
			wakeFirst(s.waiters, w)
		}
		n.mu.Unlock()
		return
	}
	n.wakeOne(w.Channel, w)
}

// wakeOne wakes the oldest waiter on channel other than except.
func (n *Notifier) wakeOne(channel string, except *Waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cw := n.chans[channel]; cw != nil {
		wakeFirst(cw.waiters, except)
	}
}

// wakeFirst wakes the oldest of waiters other than except.
func wakeFirst(waiters []*Waiter, except *Waiter) {
	// Every waiter that wants all messages gets it; of the others, the
	// oldest whose buffer is empty takes it. A full buffer already holds a
	// pending wake-up, so nothing is lost.
	woken := false
	for _, w := range waiters {
		if w == except || woken && !w.all {
			continue
		}
		w.handed.Store(true)
		if w.Signal() {
			woken = woken || !w.all
		}
	}
}

func (n *Notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, w := range n.grants {
		w.handed.Store(true)
		w.Signal()
	}
	for _, cw := range n.chans {
		for _, w := range cw.waiters {
			w.handed.Store(true)
			w.Signal()
		}
	}
	for _, s := range n.ssubs {
		for _, w := range s.waiters {
			w.handed.Store(true)
			w.Signal()
		}
	}
}
