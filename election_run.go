package dlock

import (
	"context"
	"errors"
	"fmt"
)

// RunConfig is what Election.Run calls, in the style of Kubernetes
// client-go's leader election callbacks. Only OnStartedLeading is required.
type RunConfig struct {
	// OnStartedLeading runs when this candidate is elected, with the
	// leadership (its Term is the fence for the resources the leader
	// writes, its Lock().Token the owner: see package fenced) and a
	// context cancelled when the leadership is lost (context.Cause: the
	// loss error) or Run's ctx ends; LockFrom(ctx) returns the
	// leadership's lock. It must return soon after its context is
	// cancelled: Run waits for it before it resigns, so two leaders of one
	// process never overlap. Returning ends the leadership (a resignation).
	OnStartedLeading func(ctx context.Context, l *Leadership)
	// OnStoppedLeading, if set, runs after each leadership ended (after
	// OnStartedLeading returned and the lock was given back).
	OnStoppedLeading func()
	// OnNewLeader, if set, is called with every leader observed (this
	// candidate included), in order, from one goroutine, and with a
	// LeaderInfo whose NoLeader is set when nobody leads: first, if nobody
	// led when Run started observing (this candidate may not have taken
	// the lock yet), and whenever nobody leads any more (see Observe).
	OnNewLeader func(LeaderInfo)
	// Again makes Run campaign again after a leadership ends, until ctx
	// ends. Without it Run returns after one leadership.
	Again bool
}

// Run campaigns with value and calls cfg's callbacks: the loop of a
// service that runs something on exactly one instance at a time. It
// returns when ctx ends (nil), or, without cfg.Again, when the leadership
// ends: nil after OnStartedLeading returned (the leadership was resigned),
// the loss error (matching ErrLost) if it was lost. Campaign errors other
// than ctx's end are returned as they are.
func (e *Election) Run(ctx context.Context, value string, cfg RunConfig) error {
	if err := e.check(); err != nil {
		return err
	}
	if ctx == nil {
		return ErrNilContext
	}
	if cfg.OnStartedLeading == nil {
		return fmt.Errorf("%w: RunConfig.OnStartedLeading is nil", ErrInvalidOpts)
	}
	if cfg.OnNewLeader != nil {
		octx, cancel := context.WithCancel(ctx)
		obs := e.Observe(octx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for li := range obs {
				cfg.OnNewLeader(li)
			}
		}()
		defer func() { cancel(); <-done }()
	}
	for {
		l, err := e.Campaign(ctx, value)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		err = e.lead(ctx, l, cfg.OnStartedLeading)
		if cfg.OnStoppedLeading != nil {
			cfg.OnStoppedLeading()
		}
		if ctx.Err() != nil {
			return nil
		}
		if !cfg.Again {
			return err
		}
	}
}

// lead runs fn while l leads, then resigns. It returns nil, or the loss
// error if the leadership was lost.
func (e *Election) lead(ctx context.Context, l *Leadership, fn func(context.Context, *Leadership)) error {
	lctx, stop := watchLoss(ctx, l.lk)
	fn(context.WithValue(lctx, lockCtxKey{}, l.lk), l)
	stop()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.c.opts.ReleaseTimeout)
	defer cancel()
	if err := l.Resign(rctx); errors.Is(err, ErrLost) {
		return err
	}
	return nil
}
