// shard.go owns the sharded subscriptions: which shard channels the
// Client wants, the connection to each master they are placed on, and
// when a channel is unsubscribed.

package notify

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sharded pub/sub (Redis Cluster): a queued waiter's hand-off comes by
// SPUBLISH on the Client's channel for the key's slot (slotChannelLocked),
// and a barging waiter's release message by SPUBLISH on the key's wake-up
// channel (in the key's slot too), so a message stays on the key's shard
// instead of crossing the cluster bus to every node. A slot's channel is
// subscribed (SSUBSCRIBE) while the Client has waiters in that slot, on
// the connection to the slot's master: one connection (sconn) per master.
//
// A connection that errs, is refused a channel (MOVED, CROSSSLOT), is
// told by the server that a channel is gone (a pushed sunsubscribe: the
// slot moved or its master became a replica), or misses its liveness
// probe (an SPUBLISH on one of its slot channels; a connection whose
// waiters only listen subscribes one for it, see probeChannelLocked) is
// dropped whole: its channels are subscribed again, each on the
// connection to its slot's master now, and once Redis confirms, their
// waiters are woken to try again (a message may have been lost meanwhile;
// their retry clocks run on regardless).

// ssub is one shard channel this Client wants subscribed.
type ssub struct {
	channel string
	// own: the Client's hand-off channel of a slot (refs queued waiters);
	// else a key's wake-up channel (waiters).
	own     bool
	slot    int
	refs    int
	waiters []*Waiter
	conn    *sconn // nil: not placed yet
	// confirmed is closed when Redis confirmed the SSUBSCRIBE on conn.
	confirmed chan struct{}
}

// sconn is the pub/sub connection to one master.
type sconn struct {
	addr    string
	ps      *redis.PubSub
	subs    map[string]*ssub
	unsubs  map[string]int // SUNSUBSCRIBEs sent and not yet answered
	ops     []psOp
	sending bool
	reading bool // the reader runs (started after the first SSUBSCRIBE)
	dead    bool
	// The liveness probe of this connection (see Notifier).
	probeSeq   uint64
	probeWant  string
	probeAcked time.Time
	lastProbe  time.Time
	probeSoon  bool
}

// addShardLocked registers w on the shard channel ch of slot (own: a
// slot's hand-off channel) and returns the subscription's confirmation,
// and whether the caller must place the new subscription (placeShard).
func (n *Notifier) addShardLocked(ch string, slot int, own bool, w *Waiter) (*ssub, bool) {
	s := n.ssubs[ch]
	fresh := s == nil
	if fresh {
		s = &ssub{channel: ch, own: own, slot: slot, confirmed: make(chan struct{})}
		n.ssubs[ch] = s
	}
	if own {
		s.refs++
	} else {
		s.waiters = append(s.waiters, w)
	}
	return s, fresh
}

// placeShard puts the new subscription s on the connection to its slot's
// master and queues its SSUBSCRIBE.
func (n *Notifier) placeShard(ctx context.Context, s *ssub) {
	addr := n.masterOf(ctx, s.channel)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.ssubs[s.channel] != s || s.conn != nil {
		return
	}
	n.attachLocked(s, addr)
}

// masterOf returns the address of the master of ch's slot as go-redis
// sees it ("" if it does not know: the connection then goes where
// go-redis sends it, and a wrong node answers MOVED).
func (n *Notifier) masterOf(ctx context.Context, ch string) string {
	cc, _ := n.cfg.Redis.(*redis.ClusterClient)
	if cc == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	m, err := cc.MasterForKey(ctx, ch)
	if err != nil {
		return ""
	}
	return m.Options().Addr
}

// attachLocked queues the SSUBSCRIBE of s on the connection to addr,
// opening it if there is none.
func (n *Notifier) attachLocked(s *ssub, addr string) {
	c := n.sconns[addr]
	if c == nil {
		c = &sconn{addr: addr, subs: map[string]*ssub{}, unsubs: map[string]int{}}
		c.ps = n.cfg.Redis.(*redis.ClusterClient).SSubscribe(n.ctx) // no I/O yet
		n.sconns[addr] = c
	}
	s.conn = c
	c.subs[s.channel] = s
	n.queueShardLocked(c, psOp{channel: s.channel, confirmed: s.confirmed})
}

// dropShardLocked removes w (own: a queued waiter of the slot channel ch)
// and unsubscribes ch once nobody uses it.
func (n *Notifier) dropShardLocked(ch string, own bool, w *Waiter) {
	s := n.ssubs[ch]
	if s == nil {
		return
	}
	if own {
		s.refs--
	} else {
		for i, x := range s.waiters {
			if x == w {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				break
			}
		}
	}
	if s.refs > 0 || len(s.waiters) > 0 || n.keepForProbeLocked(s) {
		return
	}
	n.unsubShardLocked(s)
	if c := s.conn; c != nil && !own && !listening(c) {
		// No listening waiter left on c: the channel kept for its
		// probe goes too.
		for _, p := range c.subs {
			if p.own && p.refs == 0 {
				n.unsubShardLocked(p)
			}
		}
	}
}

// unsubShardLocked forgets s and sends its SUNSUBSCRIBE.
func (n *Notifier) unsubShardLocked(s *ssub) {
	if n.ssubs[s.channel] == s {
		delete(n.ssubs, s.channel)
	}
	if c := s.conn; c != nil && c.subs[s.channel] == s {
		delete(c.subs, s.channel)
		if !c.dead && !n.closed {
			c.unsubs[s.channel]++
			n.queueShardLocked(c, psOp{channel: s.channel})
		}
	}
}

// keepForProbeLocked reports whether s, a slot's hand-off channel no
// queued waiter uses any more, stays subscribed as the probe's channel of
// its connection: the connection has listening waiters and no other
// hand-off channel.
func (n *Notifier) keepForProbeLocked(s *ssub) bool {
	c := s.conn
	if !s.own || c == nil || c.dead {
		return false
	}
	for _, o := range c.subs {
		if o != s && o.own {
			return false
		}
	}
	return listening(c)
}

// listening reports whether c carries a key's wake-up channel.
func listening(c *sconn) bool {
	for _, s := range c.subs {
		if !s.own {
			return true
		}
	}
	return false
}

// confirmedOf returns the channel closed once s's subscription is
// confirmed: a redial after a slot moved (see rehome) gives s a new one,
// under n.mu.
func (n *Notifier) confirmedOf(s *ssub) chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return s.confirmed
}

// closeShardsLocked ends every sharded connection (Close): their
// confirmations are no longer awaited. It returns the PubSubs to close.
func (n *Notifier) closeShardsLocked() []*redis.PubSub {
	var pss []*redis.PubSub
	for _, c := range n.sconns {
		c.dead = true
		pss = append(pss, c.ps)
	}
	for _, s := range n.ssubs {
		if !isClosed(s.confirmed) {
			close(s.confirmed)
		}
	}
	return pss
}

// ShardConns returns the number of sharded pub/sub connections (tests,
// benchmarks).
func (n *Notifier) ShardConns() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.sconns)
}
