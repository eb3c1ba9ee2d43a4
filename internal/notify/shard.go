package notify

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/probe"
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
	delete(n.ssubs, s.channel)
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

// queueShardLocked queues op for c's sender, starting it if needed.
func (n *Notifier) queueShardLocked(c *sconn, op psOp) {
	c.ops = append(c.ops, op)
	if !c.sending {
		c.sending = true
		n.loopWG.Add(1)
		go n.sendShard(c)
	}
}

// sendShard sends c's queued commands in order, outside n.mu, one
// channel per command (a slot each: one SSUBSCRIBE cannot span slots).
// The reader starts after the first SSUBSCRIBE, which dials the master of
// that channel's slot (a read first would dial a random node).
func (n *Notifier) sendShard(c *sconn) {
	defer n.loopWG.Done()
	for {
		n.mu.Lock()
		if len(c.ops) == 0 || n.closed || c.dead {
			c.ops, c.sending = nil, false
			n.mu.Unlock()
			return
		}
		op := c.ops[0]
		c.ops = c.ops[1:]
		n.mu.Unlock()
		if op.confirmed == nil {
			_ = c.ps.SUnsubscribe(n.ctx, op.channel)
			continue
		}
		err := c.ps.SSubscribe(n.ctx, op.channel)
		n.mu.Lock()
		start := !c.reading && !c.dead && !n.closed
		if start {
			c.reading = true
			n.loopWG.Add(1)
			go n.readShard(c)
		}
		n.mu.Unlock()
		if err != nil && !start {
			n.failShard(c) // never dialled: place its channels again
		}
	}
}

// failShard drops c from the sender's side when no reader will: the
// reader's own exit path (rehome) does it otherwise.
func (n *Notifier) failShard(c *sconn) {
	n.mu.Lock()
	reading := c.reading
	n.mu.Unlock()
	if !reading {
		n.rehome(c, false, false)
	}
}

// movedError reports whether err is Redis saying a channel's slot is
// served elsewhere (or spans slots after a reconnect): the slot map is
// out of date. A connection error is not: go-redis's command path reloads
// the map itself when the topology changed.
func movedError(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "MOVED ") || strings.HasPrefix(s, "ASK ") || strings.HasPrefix(s, "CROSSSLOT")
}

// readShard reads c until Close or until c fails, then places c's
// channels again (rehome).
func (n *Notifier) readShard(c *sconn) {
	defer n.loopWG.Done()
	for {
		msg, err := c.ps.ReceiveTimeout(n.ctx, n.shardTick(c))
		if n.isClosed() {
			return
		}
		if err != nil {
			if re := n.cfg.Refused(err); re != nil {
				n.refuse(re)
				continue
			}
			if isTimeout(err) {
				if n.shardProbeStep(c, time.Now()) {
					n.cfg.Logger.Warn("dlock: sharded pub/sub connection missed its liveness probe: replacing it and waking its waiters", "node", c.addr)
					n.cfg.Redialed()
					n.rehome(c, true, true)
					return
				}
				continue
			}
			// A broken connection, or MOVED/CROSSSLOT for a channel whose
			// slot is elsewhere now: go-redis would resubscribe every
			// channel in one command on one node; place them again instead.
			n.cfg.Logger.Debug("dlock: sharded pub/sub connection failed; placing its channels again", "node", c.addr, "err", err)
			n.rehome(c, true, movedError(err))
			return
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "ssubscribe":
				n.confirmShard(c, m.Channel)
			case "sunsubscribe":
				if n.pushedUnsubscribe(c, m.Channel) {
					// The server dropped a channel we want: its slot
					// moved, or this node is no longer its master.
					n.cfg.Logger.Debug("dlock: server ended a sharded subscription; placing its channels again", "node", c.addr, "channel", m.Channel)
					n.rehome(c, true, true)
					return
				}
			}
		case *redis.Message:
			n.shardMessage(c, m)
		}
	}
}

func (n *Notifier) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// shardMessage delivers a message read on c.
func (n *Notifier) shardMessage(c *sconn, m *redis.Message) {
	n.mu.Lock()
	s := n.ssubs[m.Channel]
	n.mu.Unlock()
	switch {
	case s == nil:
	case !s.own:
		n.wakeShardOne(m.Channel)
	case strings.HasPrefix(m.Payload, ProbePrefix):
		n.mu.Lock()
		if c.probeWant == m.Payload {
			c.probeWant = ""
		}
		n.mu.Unlock()
	default:
		probe.Point(probe.HandoffReceived, "")
		n.handedOff(m.Payload)
	}
}

// confirmedOf returns the channel closed once s's subscription is
// confirmed: a redial after a slot moved (see rehome) gives s a new one,
// under n.mu.
func (n *Notifier) confirmedOf(s *ssub) chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return s.confirmed
}

// confirmShard records Redis's confirmation of SSUBSCRIBE ch on c.
func (n *Notifier) confirmShard(c *sconn, ch string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.shardBackoff = 0
	if s := c.subs[ch]; s != nil && !isClosed(s.confirmed) {
		close(s.confirmed)
	}
}

// pushedUnsubscribe reports whether a sunsubscribe of ch on c came from
// the server rather than answering one of ours.
func (n *Notifier) pushedUnsubscribe(c *sconn, ch string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c.unsubs[ch] > 0 {
		c.unsubs[ch]--
		if c.unsubs[ch] == 0 {
			delete(c.unsubs, ch)
		}
		return false
	}
	return c.subs[ch] != nil
}

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
