// Package engine is the lock engine of package dlock: what every kind of
// lock shares once a protocol (package protocol, or a primitive of
// package dlock) says which calls take, renew and release it.
//
// It owns, per Client, one Engine:
//
//   - the lease of each held lock: its deadline, its renewal replies, its
//     loss, its release and the retry of a release (lease.go, release.go),
//     and the resend of recent releases after a master change (resend.go);
//   - the watchdog: heaps of leases by next renewal and by deadline, and
//     the loop that renews and expires them (watchdog.go, renew.go), with
//     bulk calls that renew or release many token locks at once (bulk.go);
//   - the reports of renewals and losses to hooks, off the renewal path
//     (report.go), in the engine's own event types (hooks.go);
//   - acquiring: one attempt after another (acquire.go), the wait between
//     them with its pub/sub wake-ups (wait.go), the withdrawal of a token
//     given up (withdraw.go), each attempt's queue mode (mode.go), through
//     the one interface every kind of lock implements (protocol.go);
//   - the blocked calls' retry clock (waitclock.go);
//   - Close's release of every lease still held, and the background
//     clean-ups Close waits for (closeall.go, background.go).
//
// It knows nothing of the public API: package dlock turns its events into
// hooks and its leases into Lock handles. Its errors are those of
// internal/errs, which package dlock re-exports.
package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Config is what an Engine needs of its Client.
type Config struct {
	Redis  redis.UniversalClient
	Exec   *rexec.Exec // runs the Client's script calls
	Timing Timing
	// ReleaseTimeout bounds the Client's own releases and clean-ups, and
	// Close's wait for hooks and background work.
	ReleaseTimeout time.Duration
	// ResendWindow: on a go-redis Sentinel (failover) client, the
	// releases confirmed within this time before the Client reaches a new
	// master are sent to it again (resend.go); 0 or less: never.
	ResendWindow time.Duration
	Logger       *slog.Logger
	// Closing is closed when the Client starts to close (before Close).
	Closing <-chan struct{}
	// GroupOf names the part of the deployment a key lives on (its Cluster
	// slot, its Ring shard, or "" on one server): what one bulk call may
	// touch.
	GroupOf func(key string) string

	// The acquiring calls' settings: the Client's notifier and queue
	// settings, the fallback retry of a blocked call (RetryInterval),
	// whether attempts ignore the wait queue (Options.Barging).
	Notify        *notify.Notifier
	Queue         *Queue
	RetryInterval time.Duration
	Barging       bool
	// Gate is the check before an attempt (the eviction policy's); Stale
	// says a new master may answer the next check.
	Gate  func(ctx context.Context) error
	Stale func()
}

// Engine is one Client's engine: its leases, watchdog, reports, retry
// clock and background work. Stats are its counters.
type Engine struct {
	rdb            redis.UniversalClient
	exec           *rexec.Exec
	timing         Timing
	releaseTimeout time.Duration
	log            *slog.Logger
	closing        <-chan struct{}
	groupOf        func(key string) string
	notify         *notify.Notifier
	queue          *Queue
	retryInterval  time.Duration
	barging        bool
	gate           func(ctx context.Context) error
	stale          func()
	wd             *watchdog
	resend         *resender // nil: releases are not sent again (resend.go)
	hooks          hookSet
	withdrawing    withdrawals // for Joiner protocols (joining.go)
	Stats          Counters

	bgMu      sync.Mutex     // guards bgDone, bgRunning and the Add side of bg
	bgDone    bool           // set by Close: no new background work
	bgRunning int            // background goroutines running (Close's WARN)
	bg        sync.WaitGroup // background work started by the engine
}

// New returns an Engine for cfg, its watchdog running.
func New(cfg Config) *Engine {
	e := &Engine{rdb: cfg.Redis, exec: cfg.Exec, timing: cfg.Timing, releaseTimeout: cfg.ReleaseTimeout,
		log: cfg.Logger, closing: cfg.Closing, groupOf: cfg.GroupOf, notify: cfg.Notify, queue: cfg.Queue,
		retryInterval: cfg.RetryInterval, barging: cfg.Barging, gate: cfg.Gate, stale: cfg.Stale}
	e.wd = newWatchdog(e)
	e.resend = newResender(e, cfg.Redis, cfg.ResendWindow)
	return e
}

// Closed reports whether the Client has started to close.
func (e *Engine) Closed() bool {
	select {
	case <-e.closing:
		return true
	default:
		return false
	}
}

// Reply codes shared by every extend and release script (see package
// protocol).
const (
	codeOK        = protocol.ReplyOK
	codeGone      = protocol.ReplyGone
	codeOther     = protocol.ReplyOtherOwner
	codeWrongType = protocol.ReplyWrongType
	// codeStolen (CodeStolen): the release found the mark a steal left
	// (q_mark_stolen in internal/lualib/queue.lua; a semaphore's in
	// semaphore_release.lua), a loss whenever the reply comes (see
	// releaseLocked).
	codeStolen = CodeStolen
)

// CodeStolen is the reply of dlock's own release scripts to a holder's
// release of a hold an operator's ForceRelease took while the holder had
// it: a loss whenever the reply comes. Not one of package protocol's codes.
const CodeStolen = -3
