package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
)

// The leader's side of an election: its handle (Leadership), the
// publication of its record (elect_publish.lua) and its refresh.

// Reply codes of elect_publish.lua beyond the shared ones.
const codeOlderTerm = -3

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
