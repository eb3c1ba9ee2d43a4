package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/errs"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
)

// Leader election is a lock held for as long as the leader lives: the
// candidates of an election named N queue for the lock N in FIFO order, the
// leader holds it (renewed by the watchdog), and its fence is the term.
// Beside the lock, in its Cluster slot, the leader publishes a record (its
// value, its term, the time it was elected) in a short history list, and
// announces each change on a pub/sub channel; readers check the record
// against the lock's holder in the same script, so a leader that lost the
// lock is never reported as the leader.
//
//	N                 the lock: the leader's token (a plain exclusive lock)
//	P:{N}:leader      list: the last 64 leader records (one per election
//	                  and per Proclaim), newest first; lives
//	                  2*TTL + 10s after the last leader's last refresh
//	P:{N}:elected     pub/sub channel: "<term>:<rev>" at each change

// MaxLeaderValue is the longest value a leader may publish, in bytes.
const MaxLeaderValue = 64 << 10

// historyLen is how many leader records an election keeps (a record per
// election and per Proclaim): an observer that could not read for longer
// than it took that many records to be published is told it missed some
// (LeaderInfo.Missed).
const historyLen = 64

// ElectionOptions configure an Election. The zero value is the default.
type ElectionOptions struct {
	// TTL is the leader's lease: a leader that dies without resigning is
	// replaced within TTL. Default: the Client's Options.TTL.
	TTL time.Duration
	// PollInterval bounds how late an observer learns of a change whose
	// pub/sub message was lost (a reconnect, a failover): it reads the
	// history at least this often. Default: 1s, at most TTL/2.
	PollInterval time.Duration
}

// Election is a leader election named name: candidates Campaign, the winner
// leads until it resigns or loses its lease, and anyone can read the
// Leader or Observe its changes. It is a lock on the key name (so one name
// is either an election or a lock, not both) plus a history of leader
// records beside it. Its methods are safe for concurrent use.
type Election struct {
	c       *Client
	name    string
	keys    protocol.Keys
	history string // the leader records
	channel string // told of every change
	ttl     time.Duration
	poll    time.Duration
	err     error // a bad argument of Client.Election, returned by every method
}

// Election returns the election named name. It makes no Redis call and
// returns no error (see Client): a bad argument is returned by Campaign,
// Leader and Run, each time (ErrEmptyKey, ErrKeyTooLong or ErrReservedKey
// for name; ErrInvalidTTL or ErrInvalidOpts for opts), and Observe's
// channel is closed at once.
func (c *Client) Election(name string, opts ElectionOptions) *Election {
	e := &Election{c: c, name: name}
	if c == nil {
		e.err = ErrNilClient
		return e
	}
	if e.err = validKey(c.opts.Prefix, name); e.err != nil {
		return e
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = c.opts.TTL
	}
	if !c.opts.ttlWorks(ttl, true) {
		e.err = c.opts.ttlError(ttl, true)
		return e
	}
	poll := opts.PollInterval
	switch {
	case poll < 0:
		e.err = fmt.Errorf("%w: ElectionOptions.PollInterval %v is negative", ErrInvalidOpts, poll)
		return e
	case poll == 0:
		poll = min(time.Second, ttl/2)
	}
	poll = max(poll, time.Millisecond)
	keys := c.keysFor(name)
	e.keys, e.history, e.channel = keys, auxOf(keys, leaderSuffix), auxOf(keys, electedSuffix)
	e.ttl, e.poll = ttl, poll
	return e
}

// check returns the error every method of e returns before it acts: a bad
// argument of Client.Election, or ErrNilClient for a nil *Election.
func (e *Election) check() error {
	if e == nil || e.c == nil {
		return ErrNilClient
	}
	return e.err
}

// Name returns the election's name (its lock key).
func (e *Election) Name() string {
	if e == nil {
		return ""
	}
	return e.name
}

// keep is how long the history lives after a leader's last refresh.
func (e *Election) keep() time.Duration { return 2*e.ttl + 10*time.Second }

// LeaderInfo describes a leader.
type LeaderInfo struct {
	Value string    // what the leader published (Campaign, Proclaim)
	Term  uint64    // the leader's fencing token: higher for every later leader
	Since time.Time // when it was elected (the server's clock, as an age from now on the local clock)
	// Rev counts the leader's published values: 1 at its election, +1 per
	// Proclaim.
	Rev uint64
	// Missed is set on an observed leader when the history no longer
	// reached back to the last one delivered: leaders may have come and
	// gone unseen before it (see Observe).
	Missed bool
	// NoLeader is set on an observed event that says nobody leads: at
	// the start of an observer that finds nobody leading, or once the last
	// leader delivered resigned or its lease ran out, and no candidate
	// holds the election's lock. Its other fields are zero. It is
	// delivered once per such gap (see Observe).
	NoLeader bool
}

// Campaign blocks until this candidate is elected or ctx ends, and returns
// its leadership, with value published as the leader's value. Candidates
// are elected in the order they began to campaign (the lock's FIFO queue;
// with Options.Barging they race instead). An elected
// candidate leads until it resigns or loses its lease (see Leadership).
//
// Errors: ErrContextDone (joined with ctx.Err()), ErrUnavailable,
// ErrNoPermission, ErrWrongType, ErrClosed, ErrNilContext, ErrValueTooLong.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, ErrNilContext
	}
	if len(value) > MaxLeaderValue {
		return nil, fmt.Errorf("%w: %d bytes", ErrValueTooLong, len(value))
	}
	for {
		lk, err := e.c.Lock(ctx, e.name, WithTTL(e.ttl))
		if err != nil {
			return nil, err
		}
		l := &Leadership{e: e, lk: lk, value: value, rev: 1, stop: make(chan struct{}), stopped: make(chan struct{})}
		err = l.publishUntil(ctx)
		if err == nil {
			go l.refresh()
			return l, nil
		}
		// Not elected after all: give the lock back (a hand-off to the
		// next candidate) and report why, or campaign again.
		close(l.stopped)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.c.opts.ReleaseTimeout)
		_ = lk.Unlock(rctx)
		cancel()
		switch {
		case errors.Is(err, ErrLost), errors.Is(err, errOlderTerm):
			continue // lost the lock before the record was out: stand again
		case ctx.Err() != nil:
			return nil, errs.CtxDone(ctx)
		}
		return nil, err
	}
}

// Leader returns the current leader of the election: ErrNoLeader if nobody
// leads (or the holder of the lock has not published itself yet).
// Errors: ErrUnavailable, ErrNoPermission, ErrWrongType, ErrNilContext.
func (e *Election) Leader(ctx context.Context) (LeaderInfo, error) {
	if err := e.check(); err != nil {
		return LeaderInfo{}, err
	}
	if ctx == nil {
		return LeaderInfo{}, ErrNilContext
	}
	recs, st, err := e.read(ctx, 1)
	if err != nil {
		return LeaderInfo{}, err
	}
	if st != leaderLive {
		return LeaderInfo{}, ErrNoLeader
	}
	return recs[0], nil
}

// leaderState is what an election's lock says of its history's head.
type leaderState int

const (
	leaderNone    leaderState = iota // the lock is free: nobody leads
	leaderLive                       // the head record's leader holds the lock
	leaderPending                    // another token holds the lock (a candidate not yet published)
)

// read returns the newest n records of the history, newest first, and
// whether the first is the leader's now, or nobody holds the lock, or a
// candidate that has not published yet does.
func (e *Election) read(ctx context.Context, n int) ([]LeaderInfo, leaderState, error) {
	call := protocol.Call{Script: scripts.ElectRead, Keys: []string{e.keys.Lock, e.history}, Args: []any{n}}
	at := time.Now()
	res, err := e.c.exec.Run(ctx, call).Slice()
	if err != nil {
		return nil, leaderNone, errs.Unavailable(err)
	}
	bad := fmt.Errorf("%w: unexpected reply from the election read script: %v", ErrUnavailable, res)
	if len(res) == 1 && res[0] == int64(codeWrongType) {
		return nil, leaderNone, ErrWrongType
	}
	if len(res) < 3 || res[0] != int64(codeOK) {
		return nil, leaderNone, bad
	}
	now, ok1 := res[1].(int64)
	live, ok2 := res[2].(int64)
	if !ok1 || !ok2 {
		return nil, leaderNone, bad
	}
	recs := make([]LeaderInfo, 0, len(res)-3)
	firstOK := false // live speaks of the newest record: only if dlock wrote it
	for i, r := range res[3:] {
		s, _ := r.(string)
		li, ok := parseLeaderRecord(s, at, now)
		if !ok {
			continue // not a record dlock wrote: skipped
		}
		firstOK = firstOK || i == 0
		recs = append(recs, li)
	}
	switch {
	case live == 0:
		return recs, leaderNone, nil
	case live == 1 && firstOK:
		return recs, leaderLive, nil
	}
	return recs, leaderPending, nil
}

// parseLeaderRecord decodes "<term>:<rev>:<since>:<holder>:<value>".
func parseLeaderRecord(s string, at time.Time, nowMs int64) (LeaderInfo, bool) {
	var f [4]string
	rest := s
	for i := range f {
		j := strings.IndexByte(rest, ':')
		if j < 0 {
			return LeaderInfo{}, false
		}
		f[i], rest = rest[:j], rest[j+1:]
	}
	term, err1 := strconv.ParseUint(f[0], 10, 64)
	rev, err2 := strconv.ParseUint(f[1], 10, 64)
	since, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || len(f[3]) != 40 {
		return LeaderInfo{}, false
	}
	return LeaderInfo{Value: rest, Term: term, Rev: rev, Since: sinceOf(at, nowMs, since)}, true
}
