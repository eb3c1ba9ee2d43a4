// closeall.go owns Close's end of the engine: the watchdog stopped, every
// lease still held released by pipelined releases whose replies are handed
// to Lease.Release, the error reporting the locks left to expire, and the
// wait for hooks and background work.

package engine

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/errs"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
)

// Close ends the engine for Client.Close, once Config.Closing is closed:
// it wakes every blocked call (they see the Client closed), stops the
// watchdog, then stopNotify (the pub/sub), releases every lease still
// held within ReleaseTimeout, ends as lost those it could not release,
// and waits for hook reports and background work, at most another
// ReleaseTimeout. It returns a *CloseError if some locks are left to
// expire by their TTL.
func (e *Engine) Close(stopNotify func()) error {
	e.wd.wakeAllWaits() // blocked calls return ErrClosed
	close(e.wd.stop)
	<-e.wd.done
	e.resend.close()
	e.wd.batches.Wait() // their round trips were cancelled by stop; hooks: waitAside below
	stopNotify()
	ctx, cancel := context.WithTimeout(ClientRelease(), e.releaseTimeout)
	defer cancel()
	// Every lease still held, also one whose Unlock failed (ended,
	// its release not confirmed): it is no longer renewed, and with
	// the watchdog stopped nothing would end it at its deadline.
	held := e.wd.live()
	left, rerrs := e.wd.releaseAll(ctx, held)
	err := errs.Close(left, len(held), rerrs)
	if err != nil {
		e.log.Warn("dlock: Close left locks to expire by their TTL", "left", left, "of", len(held), "err", err)
	}
	// A lock Close could not release (or whose release is still in
	// flight) stays in Redis until its TTL, but nothing renews it and
	// no timer is left to end it at its deadline: end it now, so its
	// Done closes and its Err says why. A release that lands later
	// still counts as a release.
	for _, l := range held {
		if lost, _ := l.loseEnding(l.Context(), errs.ErrLeftByClose); lost != nil {
			e.Stats.ReleasesLeft.Add(1)
			e.wd.reportLost(lost)
		}
	}
	// Background work started from now on runs on its caller's
	// goroutine (see Background); what runs already is waited for
	// with the hooks, within one ReleaseTimeout.
	e.bgMu.Lock()
	e.bgDone = true
	e.bgMu.Unlock()
	e.waitAside(e.releaseTimeout)
	return err
}

// releaseAll releases leases for Close: in pipelines of batchSize, up to
// renewPipelines at once, all within ctx. It returns, at the latest soon
// after ctx ends, how many it did not release (they stay in Redis until
// their TTL runs out, unless a release still in flight lands) and the
// first few errors.
func (wd *watchdog) releaseAll(ctx context.Context, leases []*Lease) (left int, rerrs []error) {
	var mu sync.Mutex
	var done int // leases whose release concluded (released, or not held)
	note := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil || errors.Is(err, errs.ErrNotHeld) {
			done++
		} else if len(rerrs) < 3 {
			rerrs = append(rerrs, err)
		}
	}
	var batched, direct []*Lease
	for _, l := range leases {
		if l.direct() {
			direct = append(direct, l)
		} else {
			batched = append(batched, l)
		}
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		sem := make(chan struct{}, renewPipelines)
		var wg sync.WaitGroup
		for len(batched) > 0 {
			n := min(len(batched), batchSize)
			part := batched[:n]
			batched = batched[n:]
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				calls := make([]protocol.Call, len(part))
				forms := make([]bulkForm, len(part))
				values := make([]string, len(part))
				for i, l := range part {
					l.endForRelease() // Done closes before the key can pass on
					values[i] = l.Token()
					calls[i], forms[i] = l.releaseCall(values[i]), releaseForm(l.proto)
				}
				replies, _ := wd.e.runCalls(ctx, calls, forms, nil)
				for i, l := range part {
					note(l.Release(withReleaseReply(ctx, values[i], replies[i].code, replies[i].err)))
				}
			}()
		}
		for _, l := range direct {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				note(l.Release(ctx))
			}()
		}
		wg.Wait()
	}()
	select {
	case <-finished:
	case <-ctx.Done():
		// A go-redis client without ContextTimeoutEnabled may wait for its
		// ReadTimeout past ctx: don't wait for it.
		select {
		case <-finished:
		case <-time.After(50 * time.Millisecond):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return len(leases) - done, rerrs
}

// releaseReply is the reply to a release already sent in a pipeline for
// value, handed to Lease.Release through its context so the release logic
// stays in one place. It is used once, and only for that value.
type releaseReply struct {
	mu    sync.Mutex
	value string
	code  int64
	err   error
	used  bool
}

type releaseReplyKey struct{}

func withReleaseReply(ctx context.Context, value string, code int64, err error) context.Context {
	return context.WithValue(ctx, releaseReplyKey{}, &releaseReply{value: value, code: code, err: err})
}

// sentRelease returns the pipelined reply of a release of value carried
// by ctx, if any and not used yet.
func sentRelease(ctx context.Context, value string) (code int64, err error, ok bool) {
	r, _ := ctx.Value(releaseReplyKey{}).(*releaseReply)
	if r == nil {
		return 0, nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.used || r.value != value {
		return 0, nil, false
	}
	r.used = true
	if rexec.IsRefusal(r.err) {
		return 0, nil, false // it did not run: sent again by itself, retried within ctx
	}
	return r.code, r.err, true
}
