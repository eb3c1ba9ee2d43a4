package dlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Refusals. While a Cluster's topology changes (a slot migrating between
// masters, a failover, a node loading its data), a node may answer a
// command with an error reply that refuses it before it runs: TRYAGAIN (a
// multi-key call whose keys are split between the two masters of a
// migrating slot), ASK and MOVED (the keys are on another node; go-redis
// follows these, but only MaxRedirects times, and not a redirect that ends
// in TRYAGAIN), CLUSTERDOWN, LOADING and MASTERDOWN. Such a command did
// not run, so sending it again cannot apply it twice; go-redis retries
// some of them a few times, within milliseconds, and a slot migration
// takes seconds. A call refused so is sent again with a jittered,
// exponential back-off until it runs, or until its bound: the caller's
// ctx, and for a renewal the lease's deadline (see withRefusalBound). A
// ctx without a deadline is bounded by refusalWait. Each refused try is
// counted in Stats.Refusals. When the bound comes first, the call's error
// is the last refusal, with how many tries were refused and for how long.
//
// An error a script raises while it runs is not a refusal, whatever its
// text: "ERR Script attempted to access a non local key" (a key of a
// migrating slot the script did not declare) comes after the script's
// earlier writes, which Redis does not roll back. Such replies carry the
// script's name and line (see scriptRaised) and are never retried here.

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

// isRefusal reports whether err is an error reply by which Redis refused a
// command before running it (see refusalCodes).
func isRefusal(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	if scriptRaised(re) {
		return false
	}
	for _, code := range refusalCodes {
		if strings.HasPrefix(msg, code) && (len(msg) == len(code) || msg[len(code)] == ' ') {
			return true
		}
	}
	return false
}

// refusedError is the error of a call whose tries were all refused until
// its bound. It is a Redis error reply (definite: the call did not run)
// that reads as the last refusal, and unwraps to it.
type refusedError struct {
	last  error
	tries int
	took  time.Duration
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("%s (refused %d times over %v)", oneLineMsg(e.last), e.tries, e.took.Round(time.Millisecond))
}
func (e *refusedError) Unwrap() error { return e.last }
func (e *refusedError) RedisError()   {}

// refusedDoneError is the error of an acquiring call whose ctx ended while
// Redis refused its acquire (see attempt): it matches ErrContextDone and
// ctx's error, as any acquire the ctx ended, and ErrUnavailable, and it
// names the last refusal.
type refusedDoneError struct {
	ctxErr, refusal error
}

func (e *refusedDoneError) Error() string {
	return fmt.Sprintf("%v: %v; Redis refused the acquire until then: %v", ErrContextDone, e.ctxErr, oneLineMsg(e.refusal))
}
func (e *refusedDoneError) Is(target error) bool {
	return target == ErrContextDone || target == ErrUnavailable
}
func (e *refusedDoneError) Unwrap() []error { return []error{e.ctxErr, e.refusal} }

// refusalBoundKey carries a bound on the retries of refused calls, earlier
// than the ctx's deadline (see withRefusalBound).
type refusalBoundKey struct{}

// withRefusalBound returns ctx with refused calls retried until t at the
// latest: a renewal's retries stay within its lease's deadline, never
// sent for a lease that has ended.
func withRefusalBound(ctx context.Context, t time.Time) context.Context {
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
	ctx   context.Context
	rdb   any
	start time.Time
	until time.Time
	ctxs  bool // until is ctx's deadline
	back  time.Duration
	tries int
}

func newRefusals(ctx context.Context, rdb any) *refusals {
	now := time.Now()
	until, ctxs := refusalUntil(ctx, now)
	return &refusals{ctx: ctx, rdb: rdb, start: now, until: until, ctxs: ctxs, back: refusalFirst}
}

// again counts n refused tries and waits before the next: it reports
// false, without waiting past it, if the bound comes first.
func (r *refusals) again(n int) bool {
	r.tries += n
	countRefusals(r.rdb, n)
	d := r.back/2 + rand.N(r.back/2+1)
	r.back = min(2*r.back, refusalMax)
	if left := time.Until(r.until); d >= left {
		if r.ctxs {
			// The ctx's deadline comes first: the call ends with it (an
			// acquire then fails as any the ctx ended), not just before.
			<-r.ctx.Done()
		}
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.ctx.Done():
		return false
	case <-t.C:
	}
	return time.Now().Before(r.until) && r.ctx.Err() == nil
}

// fail sets the error of cmd, refused on its last try, to the refusal
// with the tries and time the retries took.
func (r *refusals) fail(cmd redis.Cmder) {
	cmd.SetErr(&refusedError{last: cmd.Err(), tries: r.tries, took: time.Since(r.start)})
}

// countRefusals adds n refused tries to the count of rdb's pipeline, if
// an open Client uses rdb.
func countRefusals(rdb any, n int) {
	u, ok := rdb.(redis.UniversalClient)
	if !ok {
		return
	}
	if p := pipelineOf(u); p != nil {
		p.refusals.Add(uint64(n))
	}
}

// retryRefused returns cmd, the reply of one call send made, or if Redis
// refused it, the reply of the first try send makes again that is not
// refused, within ctx (see refusals).
func retryRefused(ctx context.Context, rdb any, cmd *redis.Cmd, send func() *redis.Cmd) *redis.Cmd {
	if !isRefusal(cmd.Err()) {
		return cmd
	}
	r := newRefusals(ctx, rdb)
	for r.again(1) {
		if cmd = send(); !isRefusal(cmd.Err()) {
			return cmd
		}
	}
	r.fail(cmd)
	return cmd
}

// runBatchRetrying is runRaw for calls whose ctx bounds them all: a call
// Redis refused is sent again, alone with the others refused, until it
// runs or ctx's bound (see refusals).
func runBatchRetrying(ctx context.Context, rdb redis.UniversalClient, calls []protocol.Call) []*redis.Cmd {
	cmds := runRaw(ctx, rdb, calls, nil)
	var r *refusals
	for {
		var again []int
		for i, cmd := range cmds {
			if isRefusal(cmd.Err()) {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			return cmds
		}
		if r == nil {
			r = newRefusals(ctx, rdb)
		}
		if !r.again(len(again)) {
			for _, i := range again {
				r.fail(cmds[i])
			}
			return cmds
		}
		sub := make([]protocol.Call, len(again))
		for n, i := range again {
			sub[n] = calls[i]
		}
		for n, cmd := range runRaw(ctx, rdb, sub, nil) {
			cmds[again[n]] = cmd
		}
	}
}

// readPipelined is rdb.Pipelined for a pipeline of reads: if Redis
// refused any of its commands, fn's pipeline is sent again, whole, until
// none is refused or ctx's bound (see refusals). fn must assign the
// commands it reads anew each time it runs.
func readPipelined(ctx context.Context, rdb redis.UniversalClient, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	cmds, err := rdb.Pipelined(ctx, fn)
	var r *refusals
	for {
		n := 0
		for _, cmd := range cmds {
			if isRefusal(cmd.Err()) {
				n++
			}
		}
		if n == 0 {
			return cmds, err
		}
		if r == nil {
			r = newRefusals(ctx, rdb)
		}
		if !r.again(n) {
			for _, cmd := range cmds {
				if isRefusal(cmd.Err()) {
					r.fail(cmd)
				}
			}
			return cmds, err
		}
		cmds, err = rdb.Pipelined(ctx, fn)
	}
}
