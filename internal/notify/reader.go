package notify

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/probe"
	"github.com/redis/go-redis/v9"
)

// loop reads the pub/sub connection until Close. After a connection error
// go-redis reconnects and re-subscribes; messages may have been missed
// meanwhile, so every waiter is woken to try again. Between messages it
// runs the liveness probe (see Notifier) and replaces a stale connection.
func (n *Notifier) loop(ps *redis.PubSub) {
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
			if re := n.cfg.Refused(err); re != nil {
				// A refused SUBSCRIBE: the connection is fine.
				n.refuse(re)
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
				n.cfg.Logger.Debug("dlock: pub/sub receive failed; waking all waiters", "err", err)
				down = true
				n.dropProbe()
				n.wakeAll()
			}
			select { // redial with back-off, at most every 500ms
			case <-time.After(backoff):
			case <-n.cfg.Closing:
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
			case strings.HasPrefix(m.Payload, ProbePrefix):
				n.probeArrived(m.Payload)
			default:
				probe.Point(probe.HandoffReceived, "")
				n.handedOff(m.Payload)
			}
		}
	}
}

// tick is how long the reader waits for a message before it looks at the
// probe again: a quarter of the probe's shorter period while waiters are
// registered or a redial is confirmed, probeEvery otherwise, 30 s with the
// probe off (as for an idle connection). busy: the connection is down or
// being resubscribed.
func (n *Notifier) tick(busy bool) time.Duration {
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

func (n *Notifier) within() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.probeWithinLocked()
}

func (n *Notifier) probeWithinLocked() time.Duration {
	return max(n.probeWithin, time.Millisecond)
}

// probeStep runs the probe's schedule at now: it reports whether the probe
// in flight is overdue (the subscription is stale), or sends the next one
// if it is due and waiters are registered.
func (n *Notifier) probeStep(now time.Time) (stale bool) {
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
	if (n.sharded || len(n.grants) == 0) && len(n.chans) == 0 {
		// No waiter on this connection (on sharded pub/sub, queued
		// waiters are on the shards' connections: see shard.go).
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
	payload := ProbePrefix + strconv.FormatUint(n.probeSeq, 10)
	n.probeWant, n.probeAcked = payload, time.Time{}
	n.loopWG.Add(1)
	go n.sendProbe(payload)
	return false
}

// sendProbe PUBLISHes a probe through the command path and records when
// Redis replied. An error drops the probe: it says Redis is down or slow,
// not that the subscription is stale, and the connection's own error path
// covers a Redis that is down.
func (n *Notifier) sendProbe(payload string) {
	defer n.loopWG.Done()
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	err := n.cfg.Redis.Publish(ctx, n.own, payload).Err()
	if err != nil {
		n.cfg.Logger.Debug("dlock: pub/sub probe not sent", "err", err)
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
func (n *Notifier) probeArrived(payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if payload == n.probeWant {
		n.probeWant = ""
	}
}

// dropProbe forgets the probe in flight (the connection failed: its own
// error path takes over).
func (n *Notifier) dropProbe() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.probeWant = ""
}

// Suspect asks for a probe at the reader's next tick: a waiter acquired on
// its retry before the holder's TTL ran out, without the wake-up the
// release should have sent (a hand-off whose message never came, or a
// release by a client that publishes nothing).
func (n *Notifier) Suspect() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.probeEvery > 0 && n.probeWant == "" && time.Since(n.lastProbe) >= n.probeWithin {
		n.probeSoon = true
	}
	n.suspectShardsLocked()
}

// redial replaces the stale connection old: a new one subscribes the own
// channel (if it was) and every channel with listeners, through the
// sender's queue so that later (UN)SUBSCRIBEs follow in order. It returns
// the new connection (nil: the Client closed) and the confirmations to
// await before waking every waiter. Confirmations still awaited on old
// are given up (those waiters are woken after the redial anyway).
func (n *Notifier) redial(old *redis.PubSub) (*redis.PubSub, []chan struct{}) {
	ps := n.cfg.Redis.Subscribe(n.ctx) // dials on first use
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
	n.cfg.Redialed() // a failover may have brought a new master: check its policy
	n.cfg.Logger.Warn("dlock: pub/sub connection missed its liveness probe: it no longer hears this Client's messages (a failover can leave it on a node nobody publishes to); replacing it and waking every waiter",
		"channels", len(awaited), "waiters", waiters)
	return ps, awaited
}

func isTimeout(err error) bool {
	t, ok := err.(interface{ Timeout() bool })
	return ok && t.Timeout()
}
