package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
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
				e := c.Election(k, dlock.ElectionOptions{TTL: ttl})
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
			// The election's loss is reported as background work if the
			// refresher found it, as a hook call if (on a starved
			// machine) the watchdog did.
			if log := logs.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "Close stopped waiting") ||
				!election && !strings.Contains(log, "background=1") {
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

// A lock granted while Close runs is released by the acquiring call, which
// returns ErrClosed. When that release fails too (Redis unreachable), the
// lock is left to expire by its TTL: once Close and the call have
// returned, Stats no longer counts it held, and a WARN names it.
func TestCloseDuringAcquireReleaseFails(t *testing.T) {
	px := redistest.NewProxy(t, srv.Addr())
	defer px.Close()
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	logs := &logBuffer{}
	c, _ := newClientOn(t, rdb, dlock.Options{
		ReleaseTimeout: 300 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	k := key(t)
	granted, proceed := make(chan struct{}), make(chan struct{})
	defer probe.Set(func(name, pk string) {
		if name == probe.AfterGrant && pk == k {
			close(granted)
			<-proceed // Close runs, and returns, before the lease starts
		}
	})()
	res := make(chan error, 1)
	go func() {
		_, err := c.TryLock(t.Context(), k, dlock.WithTTL(10*time.Second))
		res <- err
	}()
	select {
	case <-granted:
	case <-time.After(20 * time.Second):
		t.Fatal("TryLock was not granted")
	}
	px.Blackhole(true) // nothing answers the acquiring call's release
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	close(proceed)
	if err := <-res; !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("TryLock during Close = %v, want ErrClosed", err)
	}
	if st := c.Stats(); st.Held != 0 {
		t.Errorf("Stats().Held = %d after Close and the acquiring call returned, want 0 (%+v)", st.Held, st)
	}
	if log := logs.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, k) {
		t.Errorf("no WARN naming the lock left in Redis:\n%s", log)
	}
	px.Blackhole(false)
}

// delayMarked is a go-redis hook that delays the commands sent with a
// context carrying delayKey, by that much.
type delayMarked struct{}

type delayKey struct{}

func (delayMarked) DialHook(next redis.DialHook) redis.DialHook { return next }
func (delayMarked) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if d, ok := ctx.Value(delayKey{}).(time.Duration); ok {
			time.Sleep(d)
		}
		return next(ctx, cmd)
	}
}
func (delayMarked) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if d, ok := ctx.Value(delayKey{}).(time.Duration); ok {
			time.Sleep(d)
		}
		return next(ctx, cmds)
	}
}

// An Extend whose renewal reaches Redis after Close released the lock
// returns ErrClosed: the lock was released by Close, not lost (no Lost
// call, no ErrExpired), and Close counts it released.
func TestExtendRacingCloseReturnsErrClosed(t *testing.T) {
	rdb := srv.NewClient()
	rdb.AddHook(delayMarked{})
	var lost atomic.Int32
	c, _ := newClientOn(t, rdb, dlock.Options{Hooks: dlock.Hooks{
		Lost: func(_ context.Context, info dlock.LostInfo) {
			lost.Add(1)
			t.Logf("Lost %s: %v", info.Key, info.Cause)
		},
	}})
	lk, err := c.TryLock(t.Context(), key(t), dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		// Sent after Close's release, which runs meanwhile.
		res <- lk.Extend(context.WithValue(t.Context(), delayKey{}, 500*time.Millisecond), 10*time.Second)
	}()
	time.Sleep(100 * time.Millisecond) // Extend is under way
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	err = <-res
	if !errors.Is(err, dlock.ErrClosed) || errors.Is(err, dlock.ErrExpired) {
		t.Errorf("Extend racing Close = %v, want ErrClosed", err)
	}
	if err := lk.Err(); !errors.Is(err, dlock.ErrReleased) {
		t.Errorf("Err after Close = %v, want ErrReleased", err)
	}
	if st := c.Stats(); lost.Load() != 0 || st.Lost != 0 || st.Held != 0 {
		t.Errorf("Lost calls %d, Stats %+v: want no loss, nothing held", lost.Load(), st)
	}
}
