package dlock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Observing an election: every observer of one election on one Client
// shares a feed, which subscribes the election's channel on the Client's
// one pub/sub connection and reads the leader history when a message
// arrives, and at least every PollInterval in case one was lost. Each
// observer delivers, from the feed's last read, the records newer than the
// last one it delivered, oldest first: a lost message delays a change by
// at most PollInterval and never skips one, since the history keeps the
// last 64 records (one per election and per Proclaim). So 1,000 observers of an election cost one
// subscription and one read per change or interval, not 1,000.

// Observe returns a channel that delivers the election's leaders in order:
// first the current leader (or NoLeader if nobody leads), then every new leader and every new
// value a leader proclaims, each once, with strictly increasing (Term,
// Rev). A leader that came and went between two reads is still delivered,
// and so is each of several values proclaimed between two reads: the
// history keeps a record per election and per Proclaim, the last 64. If
// more than 64 were published while the observer could not read (Redis
// unreachable), the first one delivered after that has Missed set.
//
// When the last leader delivered has stopped leading (it resigned, or its
// lease ran out) and no candidate holds the election's lock, a LeaderInfo
// with NoLeader set (and every other field zero) is delivered, once,
// about PollInterval after the lock is freed at the latest (the poll finds
// a resignation or an expiry: neither is announced on the channel). A
// resignation handed straight to a waiting candidate delivers no NoLeader:
// the next leader follows. An observer that starts while nobody leads (no
// candidate holds the lock) delivers a NoLeader first, then the next
// leader; one that starts while a candidate holds the lock but has not yet
// published itself delivers that leader first (or NoLeader, if the lock
// is freed before it publishes).
//
// The channel is closed when ctx ends, the Client is closed, or the
// election's keys hold values of another type (Leader then returns
// ErrWrongType): an election that cannot be read never will be. Receive
// from it promptly: it is unbuffered, and a slow receiver only delays
// itself. A nil ctx, or an Election with a bad argument (see
// Client.Election), gives a closed channel.
func (e *Election) Observe(ctx context.Context) <-chan LeaderInfo {
	out := make(chan LeaderInfo)
	if ctx == nil || e.check() != nil {
		close(out)
		return out
	}
	f := e.c.feeds.join(e)
	go func() {
		defer close(out)
		defer e.c.feeds.leave(f)
		var last LeaderInfo // the last record delivered (or seen at the start)
		started := false
		leading := false // the last event delivered was a leader, not NoLeader
		told := false    // an event has been delivered
		for {
			snap := f.snapshot()
			if snap.wrongType {
				return
			}
			var batch []LeaderInfo
			if snap.read {
				if !started {
					started = true
					if len(snap.recs) > 0 {
						last = snap.recs[0]
						if snap.state == leaderLive {
							batch = []LeaderInfo{snap.recs[0]} // not an alias of the shared snapshot
						}
					}
				} else {
					batch = newer(snap.recs, last)
				}
				// Nobody leads: said at the first read that finds it
				// before anything was delivered, and after each leader.
				if snap.state == leaderNone && (leading || len(batch) > 0 || !told) {
					batch = append(batch, LeaderInfo{NoLeader: true})
				}
			}
			for _, li := range batch {
				select {
				case out <- li:
					told = true
					if leading = !li.NoLeader; leading {
						last = li
					}
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-snap.changed:
			case <-f.done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// newer returns the records of recs (newest first) after last, oldest
// first; the first is marked Missed if recs may not reach back to last.
func newer(recs []LeaderInfo, last LeaderInfo) []LeaderInfo {
	var out []LeaderInfo
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		if r.Term > last.Term || r.Term == last.Term && r.Rev > last.Rev {
			out = append(out, r)
		}
	}
	if len(out) > 0 && len(recs) >= historyLen && last.Term != 0 && len(out) == len(recs) &&
		(out[0].Term > last.Term || out[0].Rev > last.Rev+1) {
		out[0].Missed = true
	}
	return out
}

// feeds are a Client's election feeds, one per election channel and poll
// interval.
type feeds struct {
	mu sync.Mutex
	m  map[feedKey]*feed
}

type feedKey struct {
	channel string
	poll    time.Duration
}

// feed reads one election's history for its observers.
type feed struct {
	e    *Election
	key  feedKey
	refs int           // observers (guarded by feeds.mu)
	stop chan struct{} // closed when the last observer leaves
	done chan struct{} // closed when the feed's loop has ended

	mu   sync.Mutex
	snap feedSnap
}

// feedSnap is the outcome of a feed's last successful read.
type feedSnap struct {
	read      bool // a read has succeeded
	wrongType bool // the last read found a key of another type
	recs      []LeaderInfo
	state     leaderState   // what the lock says of recs[0]
	changed   chan struct{} // closed when a newer snapshot replaces this one
}

func (fs *feeds) join(e *Election) *feed {
	k := feedKey{e.channel, e.poll}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.m == nil {
		fs.m = map[feedKey]*feed{}
	}
	f := fs.m[k]
	if f == nil {
		f = &feed{e: e, key: k, stop: make(chan struct{}), done: make(chan struct{}),
			snap: feedSnap{changed: make(chan struct{})}}
		fs.m[k] = f
		go f.run()
	}
	f.refs++
	return f
}

func (fs *feeds) leave(f *feed) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.refs--; f.refs == 0 {
		close(f.stop)
		if fs.m[f.key] == f {
			delete(fs.m, f.key)
		}
	}
}

// publish makes s the feed's snapshot and wakes the observers.
func (f *feed) publish(s feedSnap) {
	s.changed = make(chan struct{})
	f.mu.Lock()
	old := f.snap.changed
	f.snap = s
	f.mu.Unlock()
	close(old)
}

func (f *feed) snapshot() feedSnap {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snap
}

// run reads the history at every message on the election's channel and
// every poll interval, until the last observer leaves or the Client closes.
func (f *feed) run() {
	defer close(f.done)
	c := f.e.c
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-f.stop:
		case <-c.closing:
		}
		cancel()
	}()
	w, err := c.notify.Watch(ctx, f.e.channel)
	if err != nil {
		return // the Client is closed
	}
	defer c.notify.Unsubscribe(w)
	t := time.NewTimer(0)
	defer t.Stop()
	failing := false // the last read failed: warned once for this outage
	for {
		select {
		case <-w.Wake:
		case <-t.C:
		case <-ctx.Done():
			return
		}
		rctx, rcancel := context.WithTimeout(ctx, max(f.key.poll, time.Second))
		recs, state, err := f.e.read(rctx, historyLen)
		rcancel()
		switch {
		case err == nil:
			if failing {
				failing = false
				c.opts.Logger.Info("dlock: reading an election's leaders works again", "election", f.e.name)
			}
			f.publish(feedSnap{read: true, recs: recs, state: state})
		case errors.Is(err, ErrWrongType):
			// Not an outage: the observers end (see Observe).
			c.opts.Logger.Debug("dlock: an election's keys hold another type", "election", f.e.name)
			f.publish(feedSnap{wrongType: true})
		case !failing:
			failing = true
			c.opts.Logger.Warn("dlock: reading an election's leaders failed: observers get no news until it works again; retrying",
				"election", f.e.name, "err", err)
		default:
			c.opts.Logger.Debug("dlock: reading an election's leaders failed; retrying", "election", f.e.name, "err", err)
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(f.key.poll)
	}
}
