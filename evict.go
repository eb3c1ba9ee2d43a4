package dlock

import (
	"context"
	"errors"
	"fmt"
	"github.com/dlock-go/dlock/internal/errs"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/evictpolicy"
	"github.com/redis/go-redis/v9"
)

// How long a verdict on the masters' eviction policy stands before an
// acquire reads the policies again (a CONFIG SET or a failover can change
// them at any time), and how soon a check that could not reach a master
// is tried again.
const (
	evictRecheck = 10 * time.Second
	evictRetry   = time.Second
)

// evictCheck is the Client's verdict on the eviction policy of the
// masters it writes to (see Options.AllowEviction).
type evictCheck struct {
	sem     chan struct{}         // one check at a time; waiting for it honours ctx
	until   atomic.Int64          // UnixNano the verdict stands until; 0: read again
	refusal atomic.Pointer[error] // nil: acquires may proceed
	logged  string                // the last warning logged (held: sem)
	recheck time.Duration         // evictRecheck; shorter in tests
	// looked is when dials was last compared (UnixNano), dials the
	// pool's dial count then (see newMaster).
	looked atomic.Int64
	dials  atomic.Uint32
}

// stale makes the next acquire read the policies again: a failover or a
// reconnect may have brought a new master.
func (e *evictCheck) stale() { e.until.Store(0) }

func (e *evictCheck) verdict() error {
	if p := e.refusal.Load(); p != nil {
		return *p
	}
	return nil
}

func (e *evictCheck) fresh() bool {
	u := e.until.Load()
	return u != 0 && time.Now().UnixNano() < u
}

// evictionGate is the check before a grant: a wrapped ErrEvictionPolicy
// while a master may evict keys (unless Options.AllowEviction), reading
// the policies first when the verdict is stale. A check that cannot reach
// a master keeps the previous verdict: the acquire finds out on its own.
func (c *Client) evictionGate(ctx context.Context) error {
	e := &c.evict
	if e.fresh() && !c.newMaster() {
		return e.verdict()
	}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return errs.CtxDone(ctx)
	}
	defer func() { <-e.sem }()
	if !e.fresh() {
		_ = c.judgeEviction(evictpolicy.ReadAll(ctx, c.rdb))
		e.dials.Store(c.dialled()) // the check's own dials are no news
	}
	return e.verdict()
}

// newMaster reports, at most once per evictRetry, whether the pool has
// dialled since the last look, and then makes the verdict stale: a
// failover's new master is only reached through new connections (a
// Sentinel client drops those to the old master; a Cluster client makes
// a pool for a new node). A pool that grows under load costs a check of
// the policy, at most once per evictRetry.
func (c *Client) newMaster() bool {
	e := &c.evict
	now, last := time.Now().UnixNano(), e.looked.Load()
	if now-last < int64(evictRetry) || !e.looked.CompareAndSwap(last, now) {
		return false
	}
	if d := c.dialled(); e.dials.Swap(d) != d {
		e.stale()
		return true
	}
	return false
}

// dialled is how many times rdb's pools found no idle connection and
// dialled one.
func (c *Client) dialled() uint32 {
	p, ok := c.rdb.(interface{ PoolStats() *redis.PoolStats })
	if !ok {
		return 0
	}
	s := p.PoolStats()
	if s.PipelineStats != nil {
		return s.Misses + s.PipelineStats.Misses
	}
	return s.Misses
}

// CheckServers reads the maxmemory-policy of every master the Client
// writes to (each Cluster master, each Ring shard) and returns
// ErrEvictionPolicy, wrapped with the servers and their policies, if one
// may evict keys and Options.AllowEviction is not set. Call it after New
// to refuse such a server at start-up: otherwise the first acquire makes
// the same check. A master that does not answer makes it return
// ErrUnavailable. A policy a server refuses to tell (CONFIG GET and INFO
// both denied) is logged at WARN, not returned.
func (c *Client) CheckServers(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	e := &c.evict
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return errs.CtxDone(ctx)
	}
	defer func() { <-e.sem }()
	if err := c.judgeEviction(evictpolicy.ReadAll(ctx, c.rdb)); err != nil {
		return err
	}
	return e.verdict()
}

// judgeEviction sets the verdict from the policies read (the caller holds
// sem) and logs what changed. It returns an ErrUnavailable if a master
// did not answer; the verdict then stays as it was, for evictRetry.
func (c *Client) judgeEviction(nodes []evictpolicy.Node) error {
	e := &c.evict
	evicting := evictpolicy.Evicting(nodes)
	unreached := evictpolicy.Unreached(nodes)
	var unknown []string
	for _, n := range nodes {
		if errors.Is(n.Err, evictpolicy.ErrUnreadable) {
			unknown = append(unknown, n.Addr)
		}
	}
	now := time.Now()
	switch {
	case len(evicting) > 0:
		var err error = &EvictionError{Servers: evicting}
		if c.opts.AllowEviction {
			c.warnEviction("dlock: Redis may evict lock keys; running anyway (AllowEviction): an evicted key lets a second owner in", "err", err)
			e.refusal.Store(nil)
		} else {
			c.warnEviction("dlock: Redis may evict lock keys; acquires are refused", "err", err)
			e.refusal.Store(&err)
		}
	case unreached != nil:
		e.until.Store(now.Add(evictRetry).UnixNano())
		return errs.Unavailable(unreached)
	default:
		if len(unknown) > 0 {
			c.warnEviction("dlock: could not read maxmemory-policy (CONFIG GET and INFO memory refused); locks are unsafe if Redis evicts keys", "servers", strings.Join(unknown, ", "))
		} else {
			e.logged = ""
		}
		e.refusal.Store(nil)
	}
	e.until.Store(now.Add(e.recheck).UnixNano())
	return nil
}

// warnEviction logs msg at WARN unless it was the last one logged.
func (c *Client) warnEviction(msg string, kv ...any) {
	key := fmt.Sprint(msg, kv)
	if c.evict.logged == key {
		return
	}
	c.evict.logged = key
	c.opts.Logger.Warn(msg, kv...)
}
