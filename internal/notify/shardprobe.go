// shardprobe.go owns the liveness probe of each sharded connection.

package notify

import (
	"context"
	"strconv"
	"time"
)

// probeChannelLocked subscribes, on c, the Client's hand-off channel of
// the slot of one of c's wake-up channels: the probe of a connection
// whose waiters only listen (Barging) needs a channel that only this
// Client hears, and that slot's channel is on the same master.
func (n *Notifier) probeChannelLocked(c *sconn) {
	for _, s := range c.subs {
		if s.own {
			continue
		}
		ch := n.slotChannelLocked(s.slot)
		if n.ssubs[ch] != nil {
			return // placed elsewhere meanwhile (a slot moving): probe later
		}
		p := &ssub{channel: ch, own: true, slot: s.slot, confirmed: make(chan struct{})}
		n.ssubs[ch] = p
		n.attachLocked(p, c.addr)
		return
	}
}

// shardTick is how long c's reader waits before it looks at the probe.
func (n *Notifier) shardTick(c *sconn) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.probeEvery <= 0 {
		return 30 * time.Second
	}
	if len(c.subs) > 0 || c.probeWant != "" {
		return max(min(n.probeEvery, n.probeWithin)/4, time.Millisecond)
	}
	return n.probeEvery
}

// shardProbeStep is probeStep for c: the probe is an SPUBLISH on one of
// c's slot channels through the command path, which reaches the slot's
// master now: a connection left on a node that lost the slot misses it.
func (n *Notifier) shardProbeStep(c *sconn, now time.Time) (stale bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.probeEvery <= 0 || n.refused != nil || c.dead {
		return false
	}
	if c.probeWant != "" {
		if c.probeAcked.IsZero() || now.Sub(c.probeAcked) < n.probeWithin {
			return false
		}
		c.probeWant = ""
		return true
	}
	soon := c.probeSoon || n.probeSoon
	if !soon && now.Sub(c.lastProbe) < n.probeEvery {
		return false
	}
	var ch string
	pending := false
	for _, s := range c.subs {
		if s.own && isClosed(s.confirmed) {
			ch = s.channel
			break
		}
		pending = pending || s.own
	}
	if ch == "" {
		if !pending {
			// Only listening waiters: the probe needs a hand-off channel.
			n.probeChannelLocked(c)
		}
		return false // probe once it is confirmed
	}
	c.probeSoon = false
	c.lastProbe = now
	c.probeSeq++
	payload := ProbePrefix + strconv.FormatUint(c.probeSeq, 10)
	c.probeWant, c.probeAcked = payload, time.Time{}
	n.loopWG.Add(1)
	go n.sendShardProbe(c, ch, payload)
	return false
}

// sendShardProbe SPUBLISHes a probe (see sendProbe).
func (n *Notifier) sendShardProbe(c *sconn, ch, payload string) {
	defer n.loopWG.Done()
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	err := n.cfg.Redis.SPublish(ctx, ch, payload).Err()
	n.mu.Lock()
	defer n.mu.Unlock()
	if c.probeWant != payload {
		return
	}
	if err != nil {
		c.probeWant = ""
		return
	}
	c.probeAcked = time.Now()
}

// suspectShardsLocked asks every sharded connection for a probe.
func (n *Notifier) suspectShardsLocked() {
	for _, c := range n.sconns {
		if c.probeWant == "" {
			c.probeSoon = true
		}
	}
}
