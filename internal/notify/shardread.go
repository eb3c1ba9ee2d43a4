// shardread.go owns the reader of each sharded connection: messages,
// confirmations and the server's own sunsubscribe, and the failures that
// make it place its channels again.

package notify

import (
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/probe"
	"github.com/redis/go-redis/v9"
)

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
