package dlock_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/internal/redistest"
	"go.uber.org/goleak"
)

// Close returns within its bound (the releases' ReleaseTimeout, then
// another for what runs beside them) even when work it waits for never
// ends: the Lost hook of a loss an election's refresher found (reported
// off the refresher), and a background clean-up (a waiter's withdrawal)
// that never gets an answer. It logs a WARN saying what it left running.
func TestCloseBoundedByStuckBackgroundWork(t *testing.T) {
	const releaseTimeout = time.Second
	for _, which := range []string{"election Lost hook", "withdrawal"} {
		t.Run(which, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			unblock := make(chan struct{})
			var unblockOnce sync.Once
			letGo := func() { unblockOnce.Do(func() { close(unblock) }) }
			defer letGo() // a failing test must not leave anything blocked
			entered := make(chan struct{}, 1)
			block := func() {
				select {
				case entered <- struct{}{}:
				default:
				}
				<-unblock
			}
			var hooks dlock.Hooks
			election := which == "election Lost hook"
			if election {
				hooks.Lost = func(context.Context, dlock.LostInfo) { block() }
			}
			logs := &logBuffer{}
			stall := &redistest.PipelineDelay{}
			rdb := srv.NewClient()
			defer rdb.Close()
			rdb.AddHook(stall)
			c, err := dlock.New(rdb, dlock.Options{
				ReleaseTimeout: releaseTimeout,
				Logger:         slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
				Hooks:          hooks,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			k := key(t)
			if election {
				const ttl = 3 * time.Second
				e, err := c.Election(k, dlock.ElectionOptions{TTL: ttl})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := e.Campaign(ctx, "me"); err != nil {
					t.Fatal(err)
				}
				// The watchdog's renewals (pipelines) are answered 2s
				// late, so the refresher (a single call every TTL/3)
				// finds the deleted lock first.
				stall.Set(2 * time.Second)
				if err := rdb.Del(ctx, k).Err(); err != nil {
					t.Fatal(err)
				}
			} else {
				defer probe.Set(func(name, pk string) {
					if name == probe.BeforeWithdraw && pk == k {
						block() // a clean-up stuck on a server that never answers
					}
				})()
				if _, err := c.TryLock(ctx, k); err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				_, err := c.Lock(wctx, k) // queues, gives up, withdraws in the background
				cancel()
				if err == nil {
					t.Fatal("Lock of a held key succeeded")
				}
			}
			select {
			case <-entered:
			case <-time.After(20 * time.Second):
				t.Fatalf("the %s was not reached", which)
			}
			stall.Set(0)

			closed := make(chan error, 1)
			start := time.Now()
			go func() { closed <- c.Close() }()
			select {
			case <-closed:
			case <-time.After(2*releaseTimeout + 20*time.Second): // generous: a starved machine
				letGo() // so that Close, and the test, can end
				<-closed
				t.Fatalf("Close still waiting for the blocked %s %v after it was called (ReleaseTimeout %v)",
					which, time.Since(start).Round(time.Millisecond), releaseTimeout)
			}
			took := time.Since(start)
			t.Logf("Close with a blocked %s: %v", which, took.Round(time.Millisecond))
			if log := logs.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "Close stopped waiting") ||
				!strings.Contains(log, "background=1") {
				t.Errorf("no WARN about the background work still running:\n%s", log)
			}

			letGo()
			_ = rdb.Close()
			for deadline := time.Now().Add(20 * time.Second); ; {
				err := goleak.Find(before, // itself retries for about a second
					goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"))
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("goroutines left after the blocked work returned: %v", err)
				}
			}
		})
	}
}
