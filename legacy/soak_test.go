package legacy_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/legacy"
	"github.com/redis/go-redis/v9"
)

// TestExclusionWithSeedClients runs the seeds' clients and dlock legacy
// holders concurrently on one key. Every critical section increments a
// Redis counter with an unprotected GET then SET: a single overlap loses an
// update.
func TestExclusionWithSeedClients(t *testing.T) {
	t.Parallel()
	const seedWorkers, dlockWorkers, rounds = 3, 3, 20

	run := func(t *testing.T, unit legacy.Unit, seedWorker func(ctx context.Context, rdb *redis.Client, k string, cs *counter) error) {
		k := key(t)
		cs := &counter{rdb: newRDB(t), key: k + ":counter"}
		p := legacy.New(legacy.Options{Unit: unit})
		// Seed clients publish nothing when they DEL: let dlock waiters poll
		// often enough to get a turn.
		opts := dlock.Options{RetryInterval: 10 * time.Millisecond}
		c1, _ := newDlock(t, opts)
		c2, _ := newDlock(t, opts)
		var falseAlarms atomic.Int64
		var wg sync.WaitGroup
		ctx := t.Context()
		for i := range seedWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rdb := newRDB(t)
				for range rounds {
					if err := seedWorker(ctx, rdb, k, cs); err != nil {
						t.Errorf("seed worker %d: %v", i, err)
						return
					}
				}
			}()
		}
		for i := range dlockWorkers {
			c := c1
			if i%2 == 1 {
				c = c2
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					var err error
					if r%2 == 0 {
						err = c.Do(ctx, k, cs.section, with(p, 2*time.Second)...)
					} else {
						var lk *dlock.Lock
						if lk, err = c.Lock(ctx, k, with(p, 2*time.Second)...); err == nil {
							err = errors.Join(cs.section(ctx), lk.Unlock(ctx))
						}
					}
					if errors.Is(err, dlock.ErrTaken) {
						// A seed client's GETSET overwrote our value (the
						// seeds' accepted inaccuracy): the release could not
						// recognise it. The section itself ran alone.
						falseAlarms.Add(1)
						err = nil
					}
					if err != nil {
						t.Errorf("dlock worker %d: %v", i, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		cs.check(t, (seedWorkers+dlockWorkers)*rounds)
		t.Logf("%d sections; %d dlock releases found their value overwritten by a seed client's GETSET",
			cs.sections.Load(), falseAlarms.Load())
	}

	t.Run("Seconds/Python", func(t *testing.T) {
		t.Parallel()
		run(t, legacy.Seconds, func(ctx context.Context, rdb *redis.Client, k string, cs *counter) error {
			py := &pythonClient{rdb: rdb, key: k, timeout: 3} // the seed's LOCK_TIMEOUT
			lt, err := py.lock(ctx)
			if err != nil {
				return err
			}
			return errors.Join(cs.section(ctx), py.unlock(ctx, lt))
		})
	})
	t.Run("Milliseconds/CSharp", func(t *testing.T) {
		t.Parallel()
		run(t, legacy.Milliseconds, func(ctx context.Context, rdb *redis.Client, k string, cs *counter) error {
			// The seed's 30ms sleep; its 40ms timeout is raised to 1s: the
			// seeds' clients do not renew, so a scheduling hiccup of 40ms
			// under -race would let a second seed client in, which is the
			// protocol's limit, not what this test is about.
			cs2 := &csharpClient{rdb: rdb, key: k, timeout: 1000, sleep: 30 * time.Millisecond}
			ok, err := cs2.lock(ctx)
			if err != nil || !ok {
				return errors.Join(errors.New("GetLock returned false"), err)
			}
			return errors.Join(cs.section(ctx), cs2.unlock(ctx))
		})
	})
}

// TestCrashRecovery: a holder that dies without releasing is taken over
// after its timeout by exactly one of several contenders racing with
// to take it over (dlock legacy clients with their takeover script, seed
// 000's C# loop with GETSET), 200 times.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	const reps, parallel = 200, 4
	const deadTimeout = 20 // ms
	var falseAlarms, dlockWins, seedWins, races atomic.Int64
	var wg sync.WaitGroup
	for w := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := legacy.New(legacy.Options{Unit: legacy.Milliseconds})
			opts := dlock.Options{RetryInterval: 5 * time.Millisecond}
			// getsets counts the takeovers (GETSET or dlock's script) of this
			// worker's contenders: two or more in one rep means the race
			// really happened.
			var getsets atomic.Int64
			counting := &recorder{after: func(_ context.Context, cmd redis.Cmder) {
				if isTakeoverCmd(cmd) {
					getsets.Add(1)
				}
			}}
			var clients []*dlock.Client
			for range 3 {
				c, rdb := newDlock(t, opts)
				rdb.AddHook(counting)
				clients = append(clients, c)
			}
			seedRDB := []*redis.Client{newRDB(t), newRDB(t)}
			for _, rdb := range seedRDB {
				rdb.AddHook(counting)
			}
			admin := newRDB(t)
			for rep := range reps / parallel {
				if t.Failed() {
					return
				}
				k := key(t)
				// The holder that dies: writes its timestamp, never releases.
				dead := time.Now().UnixMilli() + deadTimeout + 1
				if err := admin.Do(t.Context(), "SETNX", k, dead).Err(); err != nil {
					t.Error(err)
					return
				}
				getsets.Store(0)
				ctx, cancel := context.WithCancel(t.Context())
				type win struct {
					at   int64 // Unix ms when the contender returned with the lock
					lk   *dlock.Lock
					seed *csharpClient
				}
				wins := make(chan win, 8)
				var cw sync.WaitGroup
				for i, c := range clients {
					cw.Add(1)
					go func() {
						defer cw.Done()
						lk, err := c.Lock(ctx, k, with(p, time.Second)...)
						switch {
						case err == nil:
							wins <- win{at: time.Now().UnixMilli(), lk: lk}
						case !errors.Is(err, dlock.ErrContextDone):
							t.Errorf("worker %d rep %d dlock contender %d: %v", w, rep, i, err)
						}
					}()
				}
				for i, rdb := range seedRDB {
					cw.Add(1)
					go func() {
						defer cw.Done()
						cs := &csharpClient{rdb: rdb, key: k, timeout: 1000, sleep: time.Millisecond}
						ok, err := cs.lock(ctx)
						switch {
						case ok:
							wins <- win{at: time.Now().UnixMilli(), seed: cs}
						case !errors.Is(err, context.Canceled):
							t.Errorf("worker %d rep %d seed contender %d: %v", w, rep, i, err)
						}
					}()
				}
				var all []win
				select {
				case x := <-wins:
					all = append(all, x)
					// Give the losers time to make a second (wrong) winner.
					time.Sleep(20 * time.Millisecond)
				case <-time.After(3 * time.Second):
					t.Errorf("worker %d rep %d: nobody took over the dead holder's lock", w, rep)
				}
				cancel()
				cw.Wait()
				close(wins)
				for x := range wins {
					all = append(all, x)
				}
				if getsets.Load() >= 2 {
					races.Add(1)
				}
				counting.take()
				if len(all) > 1 {
					t.Errorf("worker %d rep %d: %d contenders took the lock", w, rep, len(all))
				}
				for _, x := range all {
					if x.at <= dead {
						t.Errorf("worker %d rep %d: taken over at %d, before the dead holder's expiry %d", w, rep, x.at, dead)
					}
					if x.lk != nil {
						dlockWins.Add(1)
						if err := x.lk.Unlock(t.Context()); errors.Is(err, dlock.ErrTaken) {
							falseAlarms.Add(1) // a seed loser's GETSET overwrote the winner's value
						} else if err != nil {
							t.Errorf("worker %d rep %d: Unlock: %v", w, rep, err)
						}
					} else {
						seedWins.Add(1)
						if err := x.seed.unlock(t.Context()); err != nil {
							t.Error(err)
						}
					}
				}
				if err := admin.Del(t.Context(), k).Err(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d takeovers: dlock %d, seed client %d; %d with two or more takeovers racing; "+
		"%d dlock winners found their value overwritten by a loser at release",
		dlockWins.Load()+seedWins.Load(), dlockWins.Load(), seedWins.Load(), races.Load(), falseAlarms.Load())
	if races.Load() == 0 {
		t.Error("no rep had contenders racing to take over")
	}
}

// isTakeoverCmd reports whether cmd takes over an expired lock: the older
// clients' GETSET or dlock's takeover script.
func isTakeoverCmd(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "getset":
		return true
	case "evalsha":
		return len(cmd.Args()) > 1 && cmd.Args()[1] == legacy.TakeoverSHA
	case "eval":
		return len(cmd.Args()) > 1 && cmd.Args()[1] == legacy.TakeoverSrc
	}
	return false
}
