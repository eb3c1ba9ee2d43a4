package evictpolicy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/redis/go-redis/v9"
)

// How long a verdict on the masters' eviction policy stands before an
// acquire reads the policies again (a CONFIG SET or a failover can change
// them at any time), and how soon a check that could not reach a master
// is tried again.
const (
	Recheck = 10 * time.Second
	retry   = time.Second
)

// Gate is a Client's verdict on the eviction policy of the masters it
// writes to (see dlock's Options.AllowEviction).
type Gate struct {
	rdb     redis.UniversalClient
	allow   bool                         // Options.AllowEviction: warn, do not refuse
	logger  *slog.Logger                 // the Client's
	refuse  func(servers []string) error // the error naming masters that may evict
	sem     chan struct{}                // one check at a time; waiting for it honours ctx
	until   atomic.Int64                 // UnixNano the verdict stands until; 0: read again
	refusal atomic.Pointer[error]        // nil: acquires may proceed
	logged  string                       // the last warning logged (held: sem)
	// Recheck is how long a verdict stands (the constant Recheck; shorter
	// in tests). Set it before the first check.
	Recheck time.Duration
	// looked is when dials was last compared (UnixNano), dials the
	// pool's dial count then (see newMaster).
	looked atomic.Int64
	dials  atomic.Uint32
}

// NewGate returns the gate of a Client over rdb: refuse makes the error
// of masters that may evict (each "address has policy"), returned by
// every check unless allow is set, when they are only logged at WARN.
func NewGate(rdb redis.UniversalClient, allow bool, logger *slog.Logger, refuse func(servers []string) error) *Gate {
	return &Gate{rdb: rdb, allow: allow, logger: logger, refuse: refuse, sem: make(chan struct{}, 1), Recheck: Recheck}
}

// Stale makes the next acquire read the policies again: a failover or a
// reconnect may have brought a new master.
func (e *Gate) Stale() { e.until.Store(0) }

func (e *Gate) verdict() error {
	if p := e.refusal.Load(); p != nil {
		return *p
	}
	return nil
}

func (e *Gate) fresh() bool {
	u := e.until.Load()
	return u != 0 && time.Now().UnixNano() < u
}

// Check is the check before a grant: the refusal while a master may evict
// keys (unless allowed), reading the policies first when the verdict is
// stale. A check that cannot reach a master keeps the previous verdict:
// the acquire finds out on its own.
func (e *Gate) Check(ctx context.Context) error {
	if e.fresh() && !e.newMaster() {
		return e.verdict()
	}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return errs.CtxDone(ctx)
	}
	defer func() { <-e.sem }()
	if !e.fresh() {
		_ = e.judge(ReadAll(ctx, e.rdb))
		e.dials.Store(e.dialled()) // the check's own dials are no news
	}
	return e.verdict()
}

// CheckNow reads the policies of every master now (see dlock's
// Client.CheckServers): the refusal, or an ErrUnavailable if a master did
// not answer.
func (e *Gate) CheckNow(ctx context.Context) error {
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return errs.CtxDone(ctx)
	}
	defer func() { <-e.sem }()
	if err := e.judge(ReadAll(ctx, e.rdb)); err != nil {
		return err
	}
	return e.verdict()
}

// newMaster reports, at most once per retry, whether the pool has
// dialled since the last look, and then makes the verdict stale: a
// failover's new master is only reached through new connections (a
// Sentinel client drops those to the old master; a Cluster client makes
// a pool for a new node). A pool that grows under load costs a check of
// the policy, at most once per retry.
func (e *Gate) newMaster() bool {
	now, last := time.Now().UnixNano(), e.looked.Load()
	if now-last < int64(retry) || !e.looked.CompareAndSwap(last, now) {
		return false
	}
	if d := e.dialled(); e.dials.Swap(d) != d {
		e.Stale()
		return true
	}
	return false
}

// dialled is how many times rdb's pools found no idle connection and
// dialled one.
func (e *Gate) dialled() uint32 {
	p, ok := e.rdb.(interface{ PoolStats() *redis.PoolStats })
	if !ok {
		return 0
	}
	s := p.PoolStats()
	if s.PipelineStats != nil {
		return s.Misses + s.PipelineStats.Misses
	}
	return s.Misses
}

// judge sets the verdict from the policies read (the caller holds sem)
// and logs what changed. It returns an ErrUnavailable if a master did not
// answer; the verdict then stays as it was, for retry.
func (e *Gate) judge(nodes []Node) error {
	evicting := Evicting(nodes)
	unreached := Unreached(nodes)
	var unknown []string
	for _, n := range nodes {
		if errors.Is(n.Err, ErrUnreadable) {
			unknown = append(unknown, n.Addr)
		}
	}
	now := time.Now()
	switch {
	case len(evicting) > 0:
		err := e.refuse(evicting)
		if e.allow {
			e.warn("dlock: Redis may evict lock keys; running anyway (AllowEviction): an evicted key lets a second owner in", "err", err)
			e.refusal.Store(nil)
		} else {
			e.warn("dlock: Redis may evict lock keys; acquires are refused", "err", err)
			e.refusal.Store(&err)
		}
	case unreached != nil:
		e.until.Store(now.Add(retry).UnixNano())
		return errs.Unavailable(unreached)
	default:
		if len(unknown) > 0 {
			e.warn("dlock: could not read maxmemory-policy (CONFIG GET and INFO memory refused); locks are unsafe if Redis evicts keys", "servers", strings.Join(unknown, ", "))
		} else {
			e.logged = ""
		}
		e.refusal.Store(nil)
	}
	e.until.Store(now.Add(e.Recheck).UnixNano())
	return nil
}

// warn logs msg at WARN unless it was the last one logged.
func (e *Gate) warn(msg string, kv ...any) {
	key := fmt.Sprint(msg, kv)
	if e.logged == key {
		return
	}
	e.logged = key
	e.logger.Warn(msg, kv...)
}
