package engine

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-go/dlock/protocol"
)

// What the tests of package dlock read and drive in the engine (its
// export_test.go hands them on); nothing else calls these.

// RenewBatch is how many renewals the watchdog sends per pipeline.
const RenewBatch = batchSize

// SleepingWaiters is how many blocked calls wait for their retry in the
// watchdog's heap.
func (e *Engine) SleepingWaiters() int {
	e.wd.mu.Lock()
	defer e.wd.mu.Unlock()
	return e.wd.waitQ.Len()
}

// WatchdogWakes is how many times the watchdog loop has woken.
func (e *Engine) WatchdogWakes() int64 { return e.wd.wakes.Load() }

// HoldExpiry makes the watchdog's deadline expiry run h first (a
// process paused past its locks' deadlines); nil undoes it.
func HoldExpiry(h func()) {
	if h == nil {
		beforeExpire.Store(nil)
		return
	}
	beforeExpire.Store(&h)
}

// RenewBurst renews every lease of leases once for ttl, now, the way the
// watchdog sends its batches (batchSize per pipeline, bulk calls, up to
// renewPipelines at once), without applying the replies, and returns how
// long it took: the renewal capacity of the Redis side and the batching.
func (e *Engine) RenewBurst(leases []*Lease, ttl time.Duration) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, renewPipelines)
	for i := 0; i < len(leases); i += batchSize {
		part := leases[i:min(i+batchSize, len(leases))]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var calls []protocol.Call
			var renewals []bulkRenewal
			for j, l := range part {
				if r, ok := l.bulkRenewal(ttl, l.Token()); ok {
					if j%5 != 0 {
						// leanFence leaves the counter alone in most
						// renewals (4 in 5 at a TTL of 3 s)
						r.fttl = 0
					}
					renewals = append(renewals, r)
				} else {
					call, _ := l.proto.Renew(l.keys, l.Token(), ttl)
					calls = append(calls, call)
				}
			}
			e.runCalls(context.Background(), calls, nil, renewals)
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// RenewKeys renews keys[i], each holding tokens[i], once for ttl the way
// the watchdog does (extend_many calls of bulkMax locks, batchSize per
// pipeline, the fence counters left alone), and returns how many were not
// extended.
func (e *Engine) RenewKeys(keys, tokens []string, ttl time.Duration) int {
	left := 0
	for i := 0; i < len(keys); i += batchSize {
		end := min(i+batchSize, len(keys))
		rs := make([]bulkRenewal, 0, end-i)
		for j := i; j < end; j++ {
			rs = append(rs, bulkRenewal{lock: keys[j], token: tokens[j], ttl: ttl.Milliseconds()})
		}
		_, replies := e.runCalls(context.Background(), nil, nil, rs)
		for _, r := range replies {
			if r.err != nil || r.code != codeOK {
				left++
			}
		}
	}
	return left
}

// WithdrawRetry is the background withdrawal of value, written by p, on
// keys: sent until Redis answers it or ctx ends (see withdrawRetry).
func (e *Engine) WithdrawRetry(ctx context.Context, p Protocol, keys protocol.Keys, value string) error {
	return e.withdrawRetry(ctx, p, keys, value)
}
