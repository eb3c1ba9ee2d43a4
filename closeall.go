// closeall.go owns Close's release of every lease still held: pipelined
// releases whose replies are handed to lease.release, and the error
// reporting the locks left to expire.

package dlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
)

// releaseAll releases leases for Close: in pipelines of batchSize, up to
// renewPipelines at once, all within ctx. It returns, at the latest soon
// after ctx ends, how many it did not release (they stay in Redis until
// their TTL runs out, unless a release still in flight lands) and the
// first few errors.
func (wd *watchdog) releaseAll(ctx context.Context, leases []*lease) (left int, errs []error) {
	var mu sync.Mutex
	var done int // leases whose release concluded (released, or not held)
	note := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil || errors.Is(err, ErrNotHeld) {
			done++
		} else if len(errs) < 3 {
			errs = append(errs, err)
		}
	}
	var batched, direct []*lease
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
				values := make([]string, len(part))
				for i, l := range part {
					l.endForRelease() // Done closes before the key can pass on
					values[i] = l.token()
					calls[i] = l.releaseCall(values[i])
				}
				replies, _ := wd.c.runCalls(ctx, calls, nil)
				for i, l := range part {
					note(l.release(withReleaseReply(ctx, values[i], replies[i].code, replies[i].err)))
				}
			}()
		}
		for _, l := range direct {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				note(l.release(ctx))
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
	return len(leases) - done, errs
}

// releaseReply is the reply to a release already sent in a pipeline for
// value, handed to lease.release through its context so the release logic
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
