// shardrehome.go owns the replacement of a sharded connection: its
// channels placed again on their slots' masters, and their waiters woken.

package notify

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// rehome drops c and places each of its channels again on the connection
// to its slot's master, reloading go-redis's slot map first. Once Redis
// confirmed them (or probeWithin passed), the waiters of those channels
// are woken to try again (wake). reload: the slot map is out of date
// (MOVED, a pushed sunsubscribe, a missed probe). Runs on c's reader (or
// its sender, if no reader ever started), which then exits.
func (n *Notifier) rehome(c *sconn, wake, reload bool) {
	n.mu.Lock()
	if c.dead {
		n.mu.Unlock()
		return
	}
	c.dead = true
	if n.sconns[c.addr] == c {
		delete(n.sconns, c.addr)
	}
	subs := make([]*ssub, 0, len(c.subs))
	for _, s := range c.subs {
		switch {
		case n.ssubs[s.channel] != s:
		case s.own && s.refs == 0:
			// Kept for c's probe only: the new connection's probe
			// subscribes a channel of its own.
			delete(n.ssubs, s.channel)
		default:
			s.conn = nil
			subs = append(subs, s)
		}
	}
	backoff := n.shardBackoff
	n.shardBackoff = min(max(2*backoff, 100*time.Millisecond), time.Second)
	n.mu.Unlock()
	_ = c.ps.Close()
	if backoff > 0 { // failing again at once: the cluster is changing
		select {
		case <-time.After(backoff):
		case <-n.cfg.Closing:
			return
		}
	}
	if cc, ok := n.cfg.Redis.(*redis.ClusterClient); ok && reload {
		cc.ReloadState(n.ctx)
	}
	var awaited []chan struct{}
	for _, s := range subs {
		addr := n.masterOf(n.ctx, s.channel)
		n.mu.Lock()
		if !n.closed && n.ssubs[s.channel] == s && s.conn == nil {
			if isClosed(s.confirmed) {
				s.confirmed = make(chan struct{})
			}
			n.attachLocked(s, addr)
			awaited = append(awaited, s.confirmed)
		}
		n.mu.Unlock()
	}
	if !wake {
		return
	}
	deadline := time.Now().Add(n.within())
	for _, ch := range awaited {
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		case <-n.cfg.Closing:
			return
		}
	}
	n.wakeShard(subs)
}

// wakeShard wakes every waiter of subs: a slot channel's queued waiters
// and a wake-up channel's listeners.
func (n *Notifier) wakeShard(subs []*ssub) {
	n.mu.Lock()
	defer n.mu.Unlock()
	slots := map[int]bool{}
	for _, s := range subs {
		if s.own {
			slots[s.slot] = true
			continue
		}
		for _, w := range s.waiters {
			w.handed.Store(true)
			w.Signal()
		}
	}
	if len(slots) == 0 {
		return
	}
	for _, w := range n.grants {
		if !w.shard {
			continue
		}
		for _, slot := range w.slots() {
			if slots[slot] {
				w.handed.Store(true)
				w.Signal()
				break
			}
		}
	}
}

// wakeShardOne wakes one listener of the wake-up channel ch (see wakeOne).
func (n *Notifier) wakeShardOne(ch string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s := n.ssubs[ch]; s != nil {
		wakeFirst(s.waiters, nil)
	}
}
