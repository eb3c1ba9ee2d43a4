package dlock_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/legacy"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// stallKey is a go-redis hook that holds back the next single command
// naming one key (armed by arm) for a while before sending it: an Extend
// or Unlock in flight for that long.
type stallKey struct {
	key   atomic.Pointer[string]
	delay time.Duration
}

func (s *stallKey) arm(key string)                              { s.key.Store(&key) }
func (s *stallKey) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *stallKey) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if k := s.key.Load(); k != nil {
			for _, a := range cmd.Args() {
				if a == *k && s.key.CompareAndSwap(k, nil) {
					time.Sleep(s.delay)
					break
				}
			}
		}
		return next(ctx, cmd)
	}
}
func (s *stallKey) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A renewal batch that meets a lock in the middle of an Extend must not
// give the other locks of the batch a Deadline past the moment Redis lets
// another client take them. The legacy protocol stamps the stored value
// when the renewal is built, so a batch that waited for the busy lock
// after building the others' renewals (and counted them from the send)
// moved their Deadlines up to that wait past the stored expiry. Checked
// for every protocol, against what Redis holds.
func TestRenewalDeadlineNotPastStoredExpiry(t *testing.T) {
	const (
		n     = 50                      // locks renewed in the batch with the busy one
		ttl   = 1500 * time.Millisecond // renewed every 500ms
		stall = 800 * time.Millisecond  // the busy lock's Extend
	)
	type kind struct {
		name string
		opts func(t *testing.T, c *dlock.Client) []dlock.LockOption
		// lock takes one lock of the kind on name.
		lock func(ctx context.Context, c *dlock.Client, name string, opts []dlock.LockOption) (*dlock.Lock, error)
		// free is the earliest moment another client may take lk, read
		// from Redis.
		free func(ctx context.Context, rdbs []*redis.Client, lk *dlock.Lock) (time.Time, error)
		// nodes > 1: a redlock over this many servers.
		nodes int
	}
	single := func(ctx context.Context, c *dlock.Client, name string, opts []dlock.LockOption) (*dlock.Lock, error) {
		return c.Lock(ctx, name, opts...)
	}
	// as takes one lock of a typed primitive on name.
	as := func(p primitive) func(ctx context.Context, c *dlock.Client, name string, opts []dlock.LockOption) (*dlock.Lock, error) {
		return func(ctx context.Context, c *dlock.Client, name string, opts []dlock.LockOption) (*dlock.Lock, error) {
			return p.Lock(ctx, c, name, opts...)
		}
	}
	// pexpiretime: the key's expiry, as Redis keeps it (a hold's key
	// expires with its last handle, here the only one). Over several
	// nodes (redlock), another client needs a majority of them free: the
	// moment the majority-th node's key expires.
	pexpiretime := func(ctx context.Context, rdbs []*redis.Client, lk *dlock.Lock) (time.Time, error) {
		var nodes []time.Time
		for _, rdb := range rdbs {
			var first time.Time
			for _, k := range lk.Keys() {
				ms, err := rdb.Do(ctx, "PEXPIRETIME", k).Int64()
				if err != nil {
					return time.Time{}, err
				}
				if ms == -2 && len(rdbs) > 1 {
					ms = 0 // gone from this node (a renewal it missed): free there
				} else if ms < 0 {
					return time.Time{}, fmt.Errorf("PEXPIRETIME %s = %d", k, ms)
				}
				if at := time.UnixMilli(ms); first.IsZero() || at.Before(first) {
					first = at
				}
			}
			nodes = append(nodes, first)
		}
		slices.SortFunc(nodes, time.Time.Compare)
		return nodes[len(nodes)/2], nil
	}
	plain := func(*testing.T, *dlock.Client) []dlock.LockOption { return nil }
	kinds := []kind{
		{name: "token", opts: plain, lock: single, free: pexpiretime},
		{name: "reentrant", opts: plain, lock: as(reentrant("owner")), free: pexpiretime},
		{name: "shared", opts: plain, lock: as(readers()), free: pexpiretime},
		{name: "semaphore", opts: plain, lock: as(permits(3, 1)),
			free: func(ctx context.Context, rdbs []*redis.Client, lk *dlock.Lock) (time.Time, error) {
				ms, err := rdbs[0].ZScore(ctx, lk.Key(), lk.Token()).Result()
				return time.UnixMilli(int64(ms)), err
			}},
		{name: "multi", opts: plain, free: pexpiretime,
			lock: func(ctx context.Context, c *dlock.Client, name string, opts []dlock.LockOption) (*dlock.Lock, error) {
				return c.LockMulti(ctx, []string{name + ":a", name + ":b"}, opts...)
			}},
		{name: "legacy", lock: single,
			opts: func(*testing.T, *dlock.Client) []dlock.LockOption {
				return []dlock.LockOption{dlock.WithProtocol(legacy.New(legacy.Options{Unit: legacy.Milliseconds}))}
			},
			free: func(ctx context.Context, rdbs []*redis.Client, lk *dlock.Lock) (time.Time, error) {
				v, err := rdbs[0].Get(ctx, lk.Key()).Result()
				if err != nil {
					return time.Time{}, err
				}
				ms, err := strconv.ParseInt(v, 10, 64)
				// Another client takes it over once its clock is past v.
				return time.UnixMilli(ms + 1), err
			}},
		{name: "redlock", nodes: 3, lock: single, free: pexpiretime},
	}
	for _, kd := range kinds {
		t.Run(kd.name, func(t *testing.T) {
			t.Parallel()
			hook := &stallKey{delay: stall}
			rdbs := []*redis.Client{srv.NewClient()}
			for i := 1; i < kd.nodes; i++ {
				rdbs = append(rdbs, redistest.Start(t, redistest.Config{}).NewClient())
			}
			for _, rdb := range rdbs {
				rdb.AddHook(hook)
			}
			var c *dlock.Client
			opts := []dlock.LockOption{dlock.WithTTL(ttl)}
			if kd.nodes > 1 {
				nodes := make([]redis.UniversalClient, len(rdbs))
				for i, r := range rdbs {
					nodes[i] = r
				}
				var p *redlock.Protocol
				var err error
				c, p, err = redlock.NewClient(nodes, redlock.Options{NodeTimeout: 300 * time.Millisecond}, dlock.Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_ = c.Close()
					for _, r := range rdbs {
						_ = r.Close()
					}
				})
				opts = append(opts, dlock.WithProtocol(p))
			} else {
				c, _ = newClientOn(t, rdbs[0], dlock.Options{})
				opts = append(opts, kd.opts(t, c)...)
			}
			ctx := t.Context()
			prefix := key(t)
			// The busy lock first, so it is the first one due and the
			// others (due within the batching slack) join its batch.
			busy, err := kd.lock(ctx, c, prefix+":busy", opts)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			locks := make([]*dlock.Lock, n)
			for i := range locks {
				if locks[i], err = kd.lock(ctx, c, fmt.Sprintf("%s:%d", prefix, i), opts); err != nil {
					t.Fatal(err)
				}
			}
			// The busy lock's Extend starts before the batch is due and
			// lasts past it.
			time.Sleep(time.Until(start.Add(ttl / 5)))
			hook.arm(busy.Keys()[0])
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = busy.Extend(context.Background(), ttl)
			}()
			time.Sleep(time.Until(start.Add(ttl/5 + stall + 100*time.Millisecond)))
			// Over the next renewal interval: every Deadline is at or
			// before the moment another client may take the lock. Deadline
			// first: a renewal in between only moves Redis's expiry later.
			checked := 0
			for end := time.Now().Add(ttl / 3); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				for i, lk := range locks {
					dl := lk.Deadline()
					if lk.Err() != nil {
						continue // lost (a loaded machine): nothing to hold to
					}
					free, err := kd.free(ctx, rdbs, lk)
					if err != nil {
						if lk.Err() != nil {
							continue
						}
						t.Fatalf("lock %d: %v", i, err)
					}
					checked++
					if dl.After(free) {
						t.Fatalf("lock %d: Deadline %s is %s after Redis lets another client take it (%s)",
							i, dl.Format("15:04:05.000"), dl.Sub(free), free.Format("15:04:05.000"))
					}
				}
			}
			wg.Wait()
			if checked == 0 {
				t.Fatal("every lock was lost: nothing checked")
			}
		})
	}
}
