package rexec

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/oneline"
	"github.com/redis/go-redis/v9"
)

// Refusals. While a Cluster's topology changes (a slot migrating between
// masters, a failover, a node loading its data), a node may answer a
// command with an error reply that refuses it before it runs: TRYAGAIN (a
// multi-key call whose keys are split between the two masters of a
// migrating slot), ASK and MOVED (the keys are on another node; go-redis
// follows these, but only MaxRedirects times, and not a redirect that ends
// in TRYAGAIN), CLUSTERDOWN, LOADING and MASTERDOWN. The try refused did
// not run (an earlier try go-redis made by itself may have: the scripts
// are safe to run twice, and a call that ends refused is withdrawn or
// reported as one that may have run where that matters, see
// MayFollowRun); go-redis retries some of them a few times, within
// milliseconds, and a slot migration takes seconds. A call refused so is sent again with a jittered,
// exponential back-off until it runs, or until its bound: the caller's
// ctx, and for a renewal the lease's deadline (see WithRefusalBound). A
// ctx without a deadline is bounded by refusalWait. Each refused try is
// counted (Exec.Refusals). When the bound comes first, the call's error
// is the last refusal, with how many tries were refused and for how long.
// When the Client closes first (Exec.EndRefusalsOn), it is that, matching
// the Client's closed error too, unless the call is the Client's own
// clean-up (OutlivingClose), which keeps its bound.
//
// An error a script raises while it runs is not a refusal, whatever its
// text: "ERR Script attempted to access a non local key" (a key of a
// migrating slot the script did not declare) comes after the script's
// earlier writes, which Redis does not roll back. Such replies carry the
// script's name and line (see ScriptRaised) and are never retried here.

// refusalCodes are the error codes of the replies that refuse a command
// before it runs.
var refusalCodes = [...]string{"TRYAGAIN", "ASK", "MOVED", "CLUSTERDOWN", "LOADING", "MASTERDOWN"}

// Back-off between tries of a refused call: the first wait is up to
// refusalFirst, each next one up to twice the last, at most refusalMax.
const (
	refusalFirst = 10 * time.Millisecond
	refusalMax   = 250 * time.Millisecond
	// refusalWait bounds the retries of a call whose ctx has no deadline.
	refusalWait = 10 * time.Second
)

// IsRefusal reports whether err is an error reply by which Redis refused a
// command before running it (see refusalCodes).
func IsRefusal(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	if ScriptRaised(re) {
		return false
	}
	for _, code := range refusalCodes {
		if strings.HasPrefix(msg, code) && (len(msg) == len(code) || msg[len(code)] == ' ') {
			return true
		}
	}
	return false
}

// retriedCodes are the error codes of the replies go-redis sends a
// command again on by itself, as it does after a connection error: a
// failover or a topology change answers these for a while.
var retriedCodes = [...]string{"TRYAGAIN", "ASK", "MOVED", "CLUSTERDOWN", "LOADING", "MASTERDOWN",
	"READONLY", "NOREPLICAS", "ERR max number of clients reached"}

// MayFollowRun reports whether err, a call's error, may be the reply to
// the last of several tries go-redis made of it by itself, an earlier one
// of which ran and lost its reply to a broken connection (go-redis sends
// a command again after a connection error and after these replies, and
// reports the last try's reply alone): a refusal, READONLY, NOREPLICAS or
// too many clients, also once the refusal retry gave up on it. Such an
// error says that the last try did not run, not that no try did. A call
// that ends on it is taken as one that may have run where a run left
// behind matters (an acquire that ends, a Counter's take); a waiting
// acquire keeps its token and its place in the queue.
func MayFollowRun(err error) bool {
	var rf *refusedError
	var crf *closedRefusedError
	if errors.As(err, &rf) || errors.As(err, &crf) {
		return true
	}
	var re redis.Error
	if err == nil || !errors.As(err, &re) || ScriptRaised(re) {
		return false
	}
	msg := re.Error()
	for _, code := range retriedCodes {
		if strings.HasPrefix(msg, code) && (len(msg) == len(code) || msg[len(code)] == ' ') {
			return true
		}
	}
	return false
}

// ScriptRaised reports whether the error reply re was raised by a script
// while it ran (a failing redis.call, a Lua error, SCRIPT KILL), rather
// than refused before it started (NOSCRIPT, BUSY, MOVED, LOADING...).
// Redis does not roll back a script's writes when it fails, so such an
// error is ambiguous, never definite: the scripts check every type before
// their first write, but one raised after a write would otherwise leave
// a key written that nobody withdraws. Redis 7 ends these replies with
// "script: <sha>, on @user_script:<line>." ("script: <function>, on
// @user_function:<line>." for a function); Redis 6 starts them with
// "ERR Error running script".
func ScriptRaised(re redis.Error) bool {
	msg := re.Error()
	return strings.Contains(msg, "user_script:") || strings.Contains(msg, "Error running script") ||
		strings.Contains(msg, "user_function:")
}

// refusedError is the error of a call whose tries were all refused until
// its bound. It is a Redis error reply that reads as the last refusal,
// and unwraps to it. None of the tries made here ran, but one go-redis
// made before the first refusal may have (see MayFollowRun).
type refusedError struct {
	last  error
	tries int
	took  time.Duration
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("%s (refused %d times over %v)", oneline.Msg(e.last), e.tries, e.took.Round(time.Millisecond))
}
func (e *refusedError) Unwrap() error { return e.last }
func (e *refusedError) RedisError()   {}

// closedRefusedError is the error of a refused call whose retries the
// Client's closing ended (see Exec.EndRefusalsOn). Like refusedError, it
// is a Redis error reply; it matches closed as well as the last refusal.
type closedRefusedError struct {
	refusedError
	closed error
}

func (e *closedRefusedError) Error() string {
	return oneline.Msg(e.closed) + " while a refused call waited to be sent again: " + e.refusedError.Error()
}
func (e *closedRefusedError) Unwrap() []error { return []error{e.closed, e.last} }

// outlivingCloseKey marks the ctx of calls whose refusals Close does not
// end (see OutlivingClose).
type outlivingCloseKey struct{}

// OutlivingClose returns ctx with its refused calls sent again until
// their bound even once the Client closes: the Client's own releases and
// clean-ups, which Close sends or waits for.
func OutlivingClose(ctx context.Context) context.Context {
	return context.WithValue(ctx, outlivingCloseKey{}, true)
}

// refusalBoundKey carries a bound on the retries of refused calls, earlier
// than the ctx's deadline (see WithRefusalBound).
type refusalBoundKey struct{}

// WithRefusalBound returns ctx with refused calls retried until t at the
// latest: a renewal's retries stay within its lease's deadline, never
// sent for a lease that has ended.
func WithRefusalBound(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, refusalBoundKey{}, t)
}

// refusalUntil returns when the retries of a call refused at now must
// end, and whether that is ctx's deadline.
func refusalUntil(ctx context.Context, now time.Time) (until time.Time, ctxs bool) {
	until, ctxs = ctx.Deadline()
	if !ctxs {
		until = now.Add(refusalWait)
	}
	if b, ok := ctx.Value(refusalBoundKey{}).(time.Time); ok && b.Before(until) {
		until, ctxs = b, false
	}
	return until, ctxs
}

// refusals retries refused calls of one caller: it counts each refused
// try and paces the tries.
type refusals struct {
	ctx     context.Context
	x       *Exec
	closing <-chan struct{} // ends the retries (nil: never)
	start   time.Time
	until   time.Time
	ctxs    bool // until is ctx's deadline
	closed  bool // closing ended the retries
	back    time.Duration
	tries   int
}

func (x *Exec) newRefusals(ctx context.Context) *refusals {
	now := time.Now()
	until, ctxs := refusalUntil(ctx, now)
	r := &refusals{ctx: ctx, x: x, start: now, until: until, ctxs: ctxs, back: refusalFirst}
	if ctx.Value(outlivingCloseKey{}) == nil {
		r.closing = x.closing
	}
	return r
}

// again counts n refused tries and waits before the next: it reports
// false, without waiting past it, if the bound comes first.
func (r *refusals) again(n int) bool {
	r.tries += n
	r.x.Refused(n)
	d := r.back/2 + rand.N(r.back/2+1)
	r.back = min(2*r.back, refusalMax)
	select {
	case <-r.closing:
		r.closed = true
		return false
	default:
	}
	if left := time.Until(r.until); d >= left {
		if r.ctxs {
			// The ctx's deadline comes first: the call ends with it (an
			// acquire then fails as any the ctx ended), not just before.
			select {
			case <-r.ctx.Done():
			case <-r.closing:
				r.closed = true
			}
		}
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.ctx.Done():
		return false
	case <-r.closing:
		r.closed = true
		return false
	case <-t.C:
	}
	return time.Now().Before(r.until) && r.ctx.Err() == nil
}

// fail sets the error of cmd, refused on its last try, to the refusal
// with the tries and time the retries took.
func (r *refusals) fail(cmd redis.Cmder) {
	e := refusedError{last: cmd.Err(), tries: r.tries, took: time.Since(r.start)}
	if r.closed && r.x.closed != nil {
		cmd.SetErr(&closedRefusedError{refusedError: e, closed: r.x.closed})
		return
	}
	cmd.SetErr(&e)
}

// retryRefused returns cmd, the reply of one call send made, or if Redis
// refused it, the reply of the first try send makes again that is not
// refused, within ctx (see refusals).
func (x *Exec) retryRefused(ctx context.Context, cmd *redis.Cmd, send func() *redis.Cmd) *redis.Cmd {
	if !IsRefusal(cmd.Err()) {
		return cmd
	}
	r := x.newRefusals(ctx)
	for r.again(1) {
		if cmd = send(); !IsRefusal(cmd.Err()) {
			return cmd
		}
	}
	r.fail(cmd)
	return cmd
}
