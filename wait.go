package dlock

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier multiplexes every waiter of a Client over ONE pub/sub
// connection. A waiter subscribes to its key's wake-up channel (waiting for
// Redis to confirm, so no release can slip between the subscription and
// the next attempt), and a release script's PUBLISH wakes one local waiter
// of that key: only one can win, and the rest stay parked until the next
// release instead of stampeding.
type notifier struct {
	c *Client

	mu sync.Mutex // guards every field below
	ps *redis.PubSub
	// chans maps a channel to its local waiters, oldest first.
	chans map[string]*chanWaiters
	// pending maps a channel to the confirmations its SUBSCRIBE commands
	// still await, in the order they were sent on the one connection.
	pending map[string][]chan struct{}
	closed  bool
	loopWG  sync.WaitGroup
}

type chanWaiters struct {
	confirmed chan struct{} // closed when Redis confirmed our SUBSCRIBE
	waiters   []*waiter
}

// waiter is one blocked call. wake has room for one signal, so a wake-up
// sent while the waiter is busy trying is not lost.
type waiter struct {
	channel string
	wake    chan struct{}
}

func newNotifier(c *Client) *notifier {
	return &notifier{c: c, chans: map[string]*chanWaiters{}, pending: map[string][]chan struct{}{}}
}

// subscribe registers a waiter on channel and waits (up to a second, or
// ctx) for Redis to confirm the subscription. Without confirmation the
// waiter still works: the fallback retry covers it.
func (n *notifier) subscribe(ctx context.Context, channel string) (*waiter, error) {
	w := &waiter{channel: channel, wake: make(chan struct{}, 1)}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, ErrClosed
	}
	if n.c.ring {
		// A Ring cannot hold one subscription for channels on different
		// shards: Ring waiters rely on the fallback retry alone.
		n.mu.Unlock()
		return w, nil
	}
	if n.ps == nil {
		n.ps = n.c.rdb.Subscribe(context.WithoutCancel(ctx))
		n.loopWG.Add(1)
		go n.loop(n.ps)
	}
	cw := n.chans[channel]
	if cw == nil {
		cw = &chanWaiters{confirmed: make(chan struct{})}
		n.chans[channel] = cw
		n.pending[channel] = append(n.pending[channel], cw.confirmed)
		if err := n.ps.Subscribe(context.WithoutCancel(ctx), channel); err != nil {
			close(cw.confirmed) // don't wait for what will not come
		}
	}
	cw.waiters = append(cw.waiters, w)
	confirmed := cw.confirmed
	n.mu.Unlock()

	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-confirmed:
	case <-t.C:
	case <-ctx.Done():
	}
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
		_ = n.ps.Unsubscribe(context.Background(), w.channel)
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
	// The oldest waiter whose buffer is empty takes it; if all already have
	// one pending, nothing is lost.
	for _, w := range cw.waiters {
		if w == except {
			continue
		}
		select {
		case w.wake <- struct{}{}:
			return
		default:
		}
	}
}

func (n *notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, cw := range n.chans {
		for _, w := range cw.waiters {
			select {
			case w.wake <- struct{}{}:
			default:
			}
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
// meanwhile, so every waiter is woken to try again.
func (n *notifier) loop(ps *redis.PubSub) {
	defer n.loopWG.Done()
	ctx := context.Background()
	for {
		msg, err := ps.ReceiveTimeout(ctx, 30*time.Second)
		if err != nil {
			n.mu.Lock()
			closed := n.closed
			n.mu.Unlock()
			if closed {
				return
			}
			if isTimeout(err) {
				// Idle: check the connection is alive; a dead one errors
				// on the next receive and is redialled.
				_ = ps.Ping(ctx)
				continue
			}
			n.c.opts.Logger.Debug("dlock: pub/sub receive failed; waking all waiters", "err", err)
			n.wakeAll()
			select { // don't spin while Redis is down
			case <-time.After(50 * time.Millisecond):
			case <-n.c.closing:
				return
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				n.confirm(m.Channel)
			}
		case *redis.Message:
			n.wakeOne(m.Channel, nil)
		}
	}
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
	if ps != nil {
		_ = ps.Close()
	}
	n.loopWG.Wait()
}

// attemptFunc makes one acquire attempt. It reports whether it acquired,
// and if not, how long the current holder still has (negative: unknown).
type attemptFunc func(ctx context.Context) (acquired bool, holderTTL time.Duration, err error)

// wait runs attempt until it acquires, fails, or ctx ends: the one waiting
// loop every primitive uses. The first attempt is made before subscribing,
// so an uncontended acquire costs one round trip.
func (c *Client) wait(ctx context.Context, channel string, attempt attemptFunc) (waited bool, err error) {
	ok, ttl, err := attempt(ctx)
	if ok || err != nil {
		return false, err
	}
	c.stats.waits.Add(1)
	c.stats.waiting.Add(1)
	defer c.stats.waiting.Add(-1)

	w, err := c.notify.subscribe(ctx, channel)
	if err != nil {
		return true, err
	}
	defer c.notify.unsubscribe(w)
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	for {
		// Subscribed now: try again before sleeping, since the holder may
		// have released between the first attempt and the subscription.
		if ok, ttl, err = attempt(ctx); ok || err != nil {
			if !ok {
				c.notify.handoff(w)
			}
			return true, err
		}
		timer.Reset(c.retryAfter(ttl))
		select {
		case <-w.wake:
		case <-timer.C:
		case <-ctx.Done():
			c.notify.handoff(w)
			return true, ctxDone(ctx)
		case <-c.closing:
			c.notify.handoff(w)
			return true, ErrClosed
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// retryAfter is the fallback wait of a blocked caller: the holder's
// remaining TTL, at most RetryInterval, plus up to 10% (at most 10ms) of
// jitter so waiters of different clients do not retry in lockstep.
func (c *Client) retryAfter(holderTTL time.Duration) time.Duration {
	d := c.opts.RetryInterval
	if holderTTL >= 0 && holderTTL < d {
		d = holderTTL
	}
	j := min(d/10, 10*time.Millisecond)
	if j > 0 {
		d += rand.N(j)
	}
	return max(d, time.Millisecond)
}
