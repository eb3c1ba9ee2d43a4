// background.go owns the background work Close waits for: clean-ups
// after an abandoned acquire or a waiter that gave up, and reports of a
// loss found off the watchdog.

package engine

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/rexec"
)

// Background runs a token-checked clean-up call in the background, bounded
// by ReleaseTimeout: the delete after an acquire whose reply was lost (a
// timeout, a cancelled context, a broken connection), which would
// otherwise leave the key held by nobody for its TTL; and the withdrawal
// of a waiter that gave up. Close waits for them, at most ReleaseTimeout
// (see waitAside): a go-redis client may wait past ctx for a server that
// does not answer. Once Close is waiting, fn runs on the caller's
// goroutine.
func (e *Engine) Background(fn func(ctx context.Context) error) {
	run := func() {
		ctx, cancel := context.WithTimeout(rexec.OutlivingClose(context.Background()), e.releaseTimeout)
		defer cancel()
		_ = fn(ctx)
	}
	if !e.goBackground(run) {
		run() // Close no longer waits for background work: do it here
	}
}

// ReportAside runs lost, the report of a loss found off the watchdog (an
// election's refresher), on a goroutine of its own, which Close waits for
// at most ReleaseTimeout: its Lost hook may call back into what found the
// loss (Resign waits for the refresher). After Close it still runs on a
// goroutine of its own, not waited for.
func (e *Engine) ReportAside(lost func()) {
	if !e.goBackground(lost) {
		go lost()
	}
}

// goBackground runs f on a goroutine Close waits for (see waitAside),
// unless Close is waiting already: then it does nothing and returns false.
func (e *Engine) goBackground(f func()) bool {
	e.bgMu.Lock()
	if e.bgDone {
		e.bgMu.Unlock()
		return false
	}
	e.bg.Add(1)
	e.bgRunning++
	e.bgMu.Unlock()
	go func() {
		defer func() {
			e.bgMu.Lock()
			e.bgRunning--
			e.bgMu.Unlock()
			e.bg.Done()
		}()
		f()
	}()
	return true
}

// waitAside is the end of Close: it waits for the goroutines reporting
// to hooks and for background work (see Background), for at most d in
// all: a hook that never returns, or a clean-up stuck on a server that
// does not answer, must not hang Close. If some are still running then,
// it logs how many and returns; they end when they return (the reporting
// goroutines after running the reports queued behind them). Nothing may
// start more of either (the loop and the batches have stopped, and
// bgDone is set).
func (e *Engine) waitAside(d time.Duration) {
	done := make(chan struct{})
	go func() {
		e.wd.hooks.Wait()
		e.bg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	running, queued := e.wd.hookCalls()
	e.bgMu.Lock()
	bg := e.bgRunning
	e.bgMu.Unlock()
	e.log.Warn("dlock: Close stopped waiting for hook calls or background clean-ups that have not returned; they keep running (hooks must not block)",
		"running", running, "queued", queued, "background", bg, "waited", d)
}
