package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// logBuffer collects a Client's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A Lost or Renew hook that never returns does not hang Close: Close waits
// for it ReleaseTimeout, logs a WARN, still releases the locks it holds,
// and returns; the hook's goroutine ends when the hook returns, and nothing
// of the Client is left running then. "left by Close": the Lost hook of a
// lock Close could not release (the server is gone) blocks.
func TestCloseDoesNotWaitForBlockedHook(t *testing.T) {
	const releaseTimeout = time.Second
	for _, which := range []string{"Lost", "Renew", "left by Close"} {
		t.Run(which, func(t *testing.T) {
			gone := which == "left by Close"
			before := goleak.IgnoreCurrent()
			unblock := make(chan struct{})
			var unblockOnce sync.Once
			letGo := func() { unblockOnce.Do(func() { close(unblock) }) }
			defer letGo() // a failing test must not leave the hook blocked
			entered := make(chan struct{}, 1)
			block := func() {
				select {
				case entered <- struct{}{}:
				default:
				}
				<-unblock
			}
			var hooks dlock.Hooks
			if which != "Renew" {
				hooks.Lost = func(context.Context, dlock.LostInfo) { block() }
			} else {
				hooks.Renew = func(context.Context, dlock.RenewInfo) { block() }
			}
			logs := &logBuffer{}
			px := redistest.NewProxy(t, srv.Addr())
			defer px.Close()
			rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1})
			defer rdb.Close()
			c, err := dlock.New(rdb, dlock.Options{
				ReleaseTimeout: releaseTimeout,
				Logger:         slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
				Hooks:          hooks,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			// Locks renewed about every 330ms; with a Lost hook, one whose
			// key is deleted, so that its next renewal finds it lost. With
			// the server gone, locks that outlive Close's releases.
			ttl := time.Second
			if gone {
				ttl = time.Minute
			}
			lk, err := c.Lock(ctx, key(t), dlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			kept, err := c.Lock(ctx, key(t), dlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			if which == "Lost" {
				if err := rdb.Del(ctx, lk.Key()).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if gone {
				px.Blackhole(true) // connections stay open, nothing answers
			} else {
				select {
				case <-entered:
				case <-time.After(20 * time.Second):
					t.Fatalf("the %s hook was not called", which)
				}
			}

			closed := make(chan error, 1)
			start := time.Now()
			go func() { closed <- c.Close() }()
			select {
			case err = <-closed:
			case <-time.After(2*releaseTimeout + 20*time.Second): // the releases', then the hooks' ReleaseTimeout
				letGo() // so that Close, and the test, can end
				<-closed
				t.Fatalf("Close still waiting for a blocked hook (%s) %v after it was called (ReleaseTimeout %v)",
					which, time.Since(start).Round(time.Millisecond), releaseTimeout)
			}
			took := time.Since(start)
			var ce *dlock.CloseError
			switch {
			case gone && !errors.As(err, &ce):
				t.Fatalf("Close = %v, want a *CloseError", err)
			case !gone && err != nil:
				t.Fatalf("Close: %v", err)
			}
			if took < releaseTimeout {
				t.Errorf("Close returned after %v: it waits for hooks ReleaseTimeout (%v)", took, releaseTimeout)
			}
			t.Logf("Close with a blocked hook (%s): %v", which, took.Round(time.Millisecond))
			if log := logs.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "Close stopped waiting") ||
				!strings.Contains(log, "running=") {
				t.Errorf("no WARN about the hook calls still running:\n%s", log)
			}
			if gone {
				select {
				case <-entered:
				default:
					t.Error("the Lost hook of a lock Close left was not called")
				}
				if err := kept.Err(); !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrClosed) {
					t.Errorf("%s: Err %v, want ErrLost and ErrClosed", kept.Key(), err)
				}
			} else if n, err := rdb.Exists(ctx, kept.Key()).Result(); err != nil || n != 0 {
				// The network work was still waited for: the lock Close
				// held was released in Redis.
				t.Errorf("%s: EXISTS %d, %v after Close: not released", kept.Key(), n, err)
			}
			select {
			case <-kept.Done():
			default:
				t.Errorf("%s: Done open after Close", kept.Key())
			}

			// The reporting goroutines end once their hooks return (and
			// run the reports queued behind them).
			letGo()
			_ = rdb.Close()
			_ = px.Close()
			for deadline := time.Now().Add(20 * time.Second); ; {
				err := goleak.Find(before, // itself retries for about a second
					goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"))
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("goroutines left after the hooks returned: %v", err)
				}
			}
		})
	}
}
