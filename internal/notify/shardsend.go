// shardsend.go owns the sender of each sharded connection: its queue of
// SSUBSCRIBE and SUNSUBSCRIBE commands, sent in order outside the lock.

package notify

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
