// report.go owns the engine's reports to hooks: the watchdog's losses
// (Lost) and renewals (Renew) run on goroutines of their own, off the
// renewal path, and Close waits for them; a release (Release) is reported
// by the Unlock that made it.

package engine

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/rexec"
)

const (
	// reporters caps the goroutines that report the watchdog's losses
	// (and run their Lost hooks) at once: a slow hook delays no other
	// lock's report while fewer than this many run, and a Client losing
	// 100,000 locks to an outage does not start a goroutine for each.
	reporters = 64
	// renewReporters caps the goroutines that run the Renew hook for the
	// watchdog's renewals, apart from those reporting losses: a Renew
	// hook that cannot keep up (or blocks) holds up no loss's report.
	renewReporters = 64
	// renewChunk is how many renewal reports one reporting goroutine
	// takes at once: a batch's reports spread over several goroutines.
	renewChunk = 64
	// maxQueuedRenews caps the renewal reports waiting for a reporting
	// goroutine (a Renew hook slower than the renewals): beyond it the
	// oldest are dropped (Stats.RenewReportsDropped).
	maxQueuedRenews = 16384
)

// renewReport is a watchdog renewal of l waiting for the Renew hook (whose
// context is l's).
type renewReport struct {
	l    *Lease
	info RenewInfo
}

// report runs f, a loss report, on one of up to reporters goroutines that
// take the losses in order; Close waits for them (see Engine.waitAside). A loss
// report is never dropped, nor does it wait for a Renew hook (see
// reportRenewals).
func (wd *watchdog) report(f func()) {
	wd.repMu.Lock()
	defer wd.repMu.Unlock()
	wd.losses = append(wd.losses, f)
	if wd.lossRunning < reporters {
		wd.lossRunning++
		wd.hooks.Add(1)
		go wd.lossLoop()
	}
}

// reportLost runs lost, the report of a loss (see Lease.Lose), on the
// reporting goroutines if there is a Lost hook, here if not.
func (wd *watchdog) reportLost(lost func()) {
	if wd.e.hooksNow().Lost != nil {
		wd.report(lost)
	} else {
		lost()
	}
}

// hookCalls returns how many goroutines are reporting to hooks, and how
// many reports wait for them (Close's WARN: see Engine.waitAside).
func (wd *watchdog) hookCalls() (running, queued int) {
	wd.repMu.Lock()
	defer wd.repMu.Unlock()
	return wd.lossRunning + wd.renewRunning, len(wd.losses) + wd.renewsQueued
}

func (wd *watchdog) lossLoop() {
	defer wd.hooks.Done()
	for {
		wd.repMu.Lock()
		if len(wd.losses) == 0 {
			wd.losses = nil
			wd.lossRunning--
			wd.repMu.Unlock()
			return
		}
		f := wd.losses[0]
		wd.losses[0] = nil
		wd.losses = wd.losses[1:]
		wd.repMu.Unlock()
		f()
	}
}

// reportRenewals hands a batch's renewal reports to up to renewReporters
// goroutines of their own (Close waits for them: see Engine.waitAside), without waiting for any
// hook: when more than maxQueuedRenews wait, the oldest are dropped and
// counted.
func (wd *watchdog) reportRenewals(rs []renewReport) {
	wd.repMu.Lock()
	defer wd.repMu.Unlock()
	for len(rs) > 0 {
		n := min(len(rs), renewChunk)
		wd.renews = append(wd.renews, rs[:n:n])
		wd.renewsQueued += n
		rs = rs[n:]
		if wd.renewRunning < renewReporters {
			wd.renewRunning++
			wd.hooks.Add(1)
			go wd.renewLoop()
		}
	}
	for wd.renewsQueued > maxQueuedRenews {
		old := wd.renews[0]
		wd.renews[0] = nil
		wd.renews = wd.renews[1:]
		wd.renewsQueued -= len(old)
		wd.e.Stats.RenewsDropped.Add(uint64(len(old)))
	}
}

func (wd *watchdog) renewLoop() {
	defer wd.hooks.Done()
	for {
		wd.repMu.Lock()
		if len(wd.renews) == 0 {
			wd.renews = nil
			wd.renewRunning--
			wd.repMu.Unlock()
			return
		}
		rs := wd.renews[0]
		wd.renews[0] = nil
		wd.renews = wd.renews[1:]
		wd.renewsQueued -= len(rs)
		wd.repMu.Unlock()
		if h := wd.e.hooksNow().Renew; h != nil {
			for _, r := range rs {
				// A report taken once its lock has ended (lost, or
				// released) is dropped: Lost has begun, or Unlock may
				// have returned, and the renewal says nothing any more.
				if r.l.held() {
					h(r.l.Context(), r.info)
				}
			}
		}
	}
}

// releaseHook calls the Release hook for an Unlock call with ctx, started
// at start, that returns err.
func (l *Lease) releaseHook(ctx context.Context, start time.Time, err error) {
	h := l.e.hooksNow().Release
	if h == nil {
		return
	}
	if releasedByClient(ctx) {
		ctx = l.Context()
	}
	h(ctx, ReleaseInfo{Key: l.keys.Lock, Fence: l.fence, Held: time.Since(l.acquiredAt), Took: time.Since(start), Err: err})
}

// clientReleaseKey marks the context of releases the Client makes on its
// own (Close): their Release hook gets the lock's context instead.
type clientReleaseKey struct{}

// ClientRelease returns the base context of a release the Client makes on
// its own: Close does not end its refusal retries (see rexec.OutlivingClose).
func ClientRelease() context.Context {
	return rexec.OutlivingClose(context.WithValue(context.Background(), clientReleaseKey{}, true))
}

func releasedByClient(ctx context.Context) bool { return ctx.Value(clientReleaseKey{}) != nil }
