package engine

import (
	"context"
	"sync/atomic"
	"time"
)

// Hooks are the engine's reports, in its own event types, which package
// dlock turns into its public hooks. Any may be nil.
type Hooks struct {
	Release func(context.Context, ReleaseInfo)
	Renew   func(context.Context, RenewInfo)
	Lost    func(context.Context, LostInfo)
	Behind  func(context.Context, BehindInfo)
}

// The events: see package dlock's types of the same names.
type (
	BehindInfo struct {
		Held    int
		Waiting int
		Lag     time.Duration
	}
	ReleaseInfo struct {
		Key   string
		Fence uint64
		Held  time.Duration
		Took  time.Duration
		Err   error
	}
	RenewInfo struct {
		Key   string
		Fence uint64
		Err   error
	}
	LostInfo struct {
		Key   string
		Fence uint64
		Held  time.Duration
		Cause error
	}
)

// hookSet holds the hooks installed now; SetHooks replaces them whole.
type hookSet struct{ p atomic.Pointer[Hooks] }

var noHooks = &Hooks{}

// SetHooks installs h: every report from now on calls h's hooks.
func (e *Engine) SetHooks(h Hooks) { e.hooks.p.Store(&h) }

// hooks returns the hooks installed now (never nil).
func (e *Engine) hooksNow() *Hooks {
	if h := e.hooks.p.Load(); h != nil {
		return h
	}
	return noHooks
}

// Counters are the engine's counters, which package dlock's Stats
// report; every field is updated atomically.
type Counters struct {
	Acquired, NotAcquired, Errors, Waits      atomic.Uint64
	Handoffs                                  atomic.Uint64
	Renewals, RenewalFailures, Lost, Released atomic.Uint64
	Behind, RenewsDropped, PubSubRedials      atomic.Uint64
	ReleasesLeft, ReleasesResent              atomic.Uint64
	Held, Waiting, AcquireNanos               atomic.Int64
}
