package dlock

import (
	"context"
	"errors"
	"fmt"
	"github.com/dlock-go/dlock/internal/errs"
	"strconv"
	"strings"
	"sync"
	"time"

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

// Reply codes of elect_publish.lua beyond the shared ones.
const codeOlderTerm = -3

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

// errOlderTerm: the history's newest record has a term at least the
// campaign's (the fence counter went back); the campaign stands again for
// a fresh fence.
var errOlderTerm = errors.New("dlock: election history has a newer term")

// Leadership is an elected candidate's hold on an election. Its Done and
// Err are those of the lock behind it: Done is closed when the leadership
// ends (resigned or lost), on the monotonic clock at the lease's deadline
// if renewals fail, so a leader paused past its lease sees the loss before
// it acts again once it resumes, provided it checks Err (or Done) first.
// Its methods are safe for concurrent use.
type Leadership struct {
	e  *Election
	lk *Lock

	mu    sync.Mutex // serialises publications; guards value, rev and lost
	value string
	rev   uint64
	lost  func() // the report of a loss found under mu (see unlock)

	stop     chan struct{} // closed by Resign: the refresher ends
	stopOnce sync.Once
	stopped  chan struct{} // closed when the refresher has ended
	since    time.Time
}

// Term returns the leader's term: its lock's fencing token, higher than
// every earlier leader's. Pass it to the resources the leader writes
// (package fenced) so that a deposed leader's late writes are refused.
func (l *Leadership) Term() uint64 { return l.lk.Fence() }

// Value returns the value this leader published last.
func (l *Leadership) Value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// Since returns when this leader was elected (see LeaderInfo.Since).
func (l *Leadership) Since() time.Time { return l.since }

// Done returns a channel closed when the leadership ends: resigned, or
// lost (see Lock.Done).
func (l *Leadership) Done() <-chan struct{} { return l.lk.Done() }

// Err returns nil while leading; ErrReleased once Resign begins; after a loss, an
// error matching ErrLost and its cause. Past the lease's deadline it
// reports the loss at once (see Lock.Err).
func (l *Leadership) Err() error { return l.lk.Err() }

// Deadline returns the moment until which this candidate is certainly the
// leader (see Lock.Deadline).
func (l *Leadership) Deadline() time.Time { return l.lk.Deadline() }

// Lock returns the lock behind the leadership: its key is the election's
// name, its fence the term, and Unlock on it resigns (like Resign). For
// code that runs anything under a *Lock (Client.Do's helpers, a process
// supervisor) while leading.
func (l *Leadership) Lock() *Lock { return l.lk }

// Election returns the election led.
func (l *Leadership) Election() *Election { return l.e }

// Proclaim publishes value as the leader's new value, without an election:
// observers see it with the same term and the next Rev. It returns a loss
// error (matching ErrLost) if this candidate no longer leads, ErrUnavailable
// if Redis did not answer (the value is then published by the leader's
// next refresh, within TTL/3, or by a retried Proclaim; it is applied
// once), ErrValueTooLong, or ErrNilContext.
func (l *Leadership) Proclaim(ctx context.Context, value string) (err error) {
	if ctx == nil {
		return ErrNilContext
	}
	if len(value) > MaxLeaderValue {
		return fmt.Errorf("%w: %d bytes", ErrValueTooLong, len(value))
	}
	l.mu.Lock()
	defer l.unlock()
	if l.lost, err = l.lk.l.ErrNow(); err != nil {
		return err
	}
	if value == l.value {
		return nil
	}
	// On ErrUnavailable the new value may or may not be out: it stays the
	// leader's value, and the refresh (or a retried Proclaim) sends the
	// same record again, which applies it once.
	l.value, l.rev = value, l.rev+1
	_, err = l.publishLocked(ctx)
	return err
}

// Resign ends the leadership at once: Done is closed and Err returns
// ErrReleased before the lock is released, and the election's lock goes
// straight to the next candidate in line (a FIFO hand-off), which is
// elected without waiting for any lease to run out. So this leader has
// stopped leading before its successor starts, even if Resign's reply
// comes back later. It is idempotent; after a loss it returns the loss
// error; after ErrUnavailable the leadership has ended all the same, and
// a retried Resign frees the lock sooner than its lease would (see
// Lock.Unlock). The published record stays in the history; it is no longer
// the leader's, as readers check it against the lock.
func (l *Leadership) Resign(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	l.stopOnce.Do(func() { close(l.stop) })
	select {
	case <-l.stopped:
	case <-ctx.Done():
	}
	return l.lk.Unlock(ctx)
}

// publishUntil publishes the elected candidate's record, retrying a Redis
// error until ctx ends or the lock is lost.
func (l *Leadership) publishUntil(ctx context.Context) error {
	back := 10 * time.Millisecond
	for {
		l.mu.Lock()
		since, err := l.publishLocked(ctx)
		l.unlock()
		if err == nil {
			l.since = since
			return nil
		}
		if !errors.Is(err, ErrUnavailable) {
			return err
		}
		t := time.NewTimer(back)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errs.CtxDoneAfter(ctx, err)
		case <-l.lk.Done():
			t.Stop()
			return l.lk.Err()
		}
		back = min(2*back, 500*time.Millisecond)
	}
}

// unlock lets go of l.mu, then reports a loss found under it: the Lost
// hook may call back into the Leadership (Resign, Value).
func (l *Leadership) unlock() {
	lost := l.lost
	l.lost = nil
	l.mu.Unlock()
	if lost != nil {
		lost()
	}
}

// publishLocked runs elect_publish.lua for the current value and revision.
// A "not the holder" reply ends the lease as lost. Callers hold l.mu.
func (l *Leadership) publishLocked(ctx context.Context) (time.Time, error) {
	e := l.e
	call := protocol.Call{Script: scripts.ElectPublish, Keys: []string{e.keys.Lock, e.history}, Args: []any{
		l.lk.Token(), strconv.FormatUint(l.lk.Fence(), 10), strconv.FormatUint(l.rev, 10), l.value,
		e.keep().Milliseconds(), e.channel, historyLen}}
	sent := time.Now()
	res, err := e.c.exec.Run(ctx, call).Slice()
	if err != nil {
		return time.Time{}, errs.Unavailable(err)
	}
	bad := fmt.Errorf("%w: unexpected reply from the election script: %v", ErrUnavailable, res)
	if len(res) < 2 {
		return time.Time{}, bad
	}
	code, _ := res[0].(int64)
	arg, _ := res[1].(string)
	switch code {
	case codeOK:
		now, ok := int64(0), len(res) == 3
		if ok {
			now, ok = res[2].(int64)
		}
		ms, err := strconv.ParseInt(arg, 10, 64)
		if err != nil || !ok {
			return time.Time{}, bad
		}
		return sinceOf(sent, now, ms), nil
	case codeGone:
		l.lost, err = l.lk.l.Lose(l.lk.l.Context(), ErrExpired)
		return time.Time{}, err
	case codeWrongType:
		return time.Time{}, ErrWrongType
	case codeOlderTerm:
		return time.Time{}, fmt.Errorf("%w: %s, ours %d", errOlderTerm, arg, l.lk.Fence())
	}
	return time.Time{}, bad
}

// sinceOf converts a server time (ms) into local time, given the server's
// clock now (ms) at local time at.
func sinceOf(at time.Time, nowMs, thenMs int64) time.Time {
	return at.Add(-time.Duration(nowMs-thenMs) * time.Millisecond)
}

// refresh keeps the leader's record (and the history) alive while it
// leads: the same publication every TTL/3, which changes nothing but the
// history's expiry.
func (l *Leadership) refresh() {
	defer close(l.stopped)
	t := time.NewTicker(l.e.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-l.stop:
			return
		case <-l.lk.Done():
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.e.ttl/3)
		l.mu.Lock()
		_, _ = l.publishLocked(ctx) // a failure is retried at the next tick; a loss ends the lease
		lost := l.lost
		l.lost = nil
		l.mu.Unlock()
		cancel()
		if lost != nil {
			// Reported on a goroutine of its own (Close waits for it, at
			// most ReleaseTimeout), not here: the Lost hook may call
			// Resign, which waits for this goroutine to end.
			l.e.c.eng.ReportAside(lost)
		}
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
