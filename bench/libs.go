package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/benchkit"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// bsmTTL is the lock TTL given to bsm/redislock, which has no default
// (the TTL is a required argument of Obtain). 8s is redsync's default.
const bsmTTL = 8 * time.Second

// A lib is one lock library in one configuration.
type lib struct {
	Name     string `json:"name"`
	Library  string `json:"library"`
	Defaults bool   `json:"defaults"` // the library's default settings
	Settings string `json:"settings"`
	// open makes one lock client with its own connections (one "process"),
	// counting its round trips in trips.
	open func(addr string, trips *benchkit.RoundTripCounter) (*locker, error)
}

// A locker is one process's lock client.
type locker struct {
	acquire benchkit.Acquire
	close   func() error
}

// libs lists every configuration, defaults first for each library.
func libs() []lib {
	return []lib{
		{
			Name: "dlock", Library: "dlock", Defaults: true,
			Settings: "defaults: FIFO wait queue with direct hand-off, TTL 10s renewed by the watchdog, Lock(ctx, key)",
			open:     dlockOpen(dlock.Options{}),
		},
		{
			Name: "dlock-barging", Library: "dlock",
			Settings: "Options.Barging: no queue; every waiter is woken by a pub/sub message on release and they race",
			open:     dlockOpen(dlock.Options{Barging: true}),
		},
		{
			Name: "dlock-evalsha", Library: "dlock",
			Settings: "Options.NoFunctions: the scripts run by EVALSHA, not as Redis Functions (FCALL); otherwise the defaults",
			open:     dlockOpen(dlock.Options{NoFunctions: true}),
		},
		{
			Name: "redsync", Library: "go-redsync/redsync v4.18.1", Defaults: true,
			Settings: "defaults: expiry 8s, 32 tries, random 50–250ms retry delay (a Lock gives up with ErrFailed after ~5s); goredis/v9 pool",
			open:     redsyncOpen(),
		},
		{
			Name: "redsync-1ms", Library: "go-redsync/redsync v4.18.1",
			Settings: "WithRetryDelay(1ms), WithTries(MaxInt32): poll every 1ms until the context ends",
			open:     redsyncOpen(redsync.WithRetryDelay(time.Millisecond), redsync.WithTries(1<<31-1)),
		},
		{
			Name: "bsm", Library: "bsm/redislock v0.10.0", Defaults: true,
			Settings: "defaults: NoRetry, so the caller calls Obtain again at once on ErrNotObtained (busy re-try); TTL 8s",
			open:     bsmOpen(nil),
		},
		{
			Name: "bsm-linear1ms", Library: "bsm/redislock v0.10.0",
			Settings: "RetryStrategy LinearBackoff(1ms), waiting bounded by the context; TTL 8s",
			open:     bsmOpen(func() redislock.RetryStrategy { return redislock.LinearBackoff(time.Millisecond) }),
		},
		{
			Name: "rueidislock", Library: "rueidis v1.0.79 rueidislock", Defaults: true,
			Settings: "defaults: KeyMajority 2 (3 keys), client-side caching on (invalidations wake waiters), KeyValidity 5s",
			open:     rueidisOpen(rueidislock.LockerOption{}),
		},
		{
			Name: "rueidislock-km1", Library: "rueidis v1.0.79 rueidislock",
			Settings: "KeyMajority 1 (one key, the single-instance advice), NoLoopTracking, caching on",
			open:     rueidisOpen(rueidislock.LockerOption{KeyMajority: 1, NoLoopTracking: true}),
		},
		{
			Name: "rueidislock-km1-nocsc", Library: "rueidis v1.0.79 rueidislock",
			Settings: "KeyMajority 1, ClientOption.DisableCache: no invalidations, waiters poll every TryNextAfter (20ms)",
			open: rueidisOpen(rueidislock.LockerOption{KeyMajority: 1,
				ClientOption: rueidis.ClientOption{DisableCache: true}}),
		},
		{
			Name: "simplest", Library: "reference on go-redis v9.23.0",
			Settings: "a reference, not a peer: the simplest correct single-instance lock; acquire SET key token NX PX 8s " +
				"(random token), called again at once when not obtained (busy re-try, as bsm); " +
				"release EVALSHA of a compare-and-delete script (Script.Run); the bsm go-redis client settings",
			open: simplestOpen,
		},
	}
}

// goRedis returns a go-redis client with default options (so a pool of
// its own, as a process would have) whose round trips are counted.
func goRedis(addr string, trips *benchkit.RoundTripCounter) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	rdb.AddHook(trips)
	return rdb
}

func dlockOpen(opts dlock.Options) func(string, *benchkit.RoundTripCounter) (*locker, error) {
	return func(addr string, trips *benchkit.RoundTripCounter) (*locker, error) {
		rdb := goRedis(addr, trips)
		c, err := dlock.New(rdb, opts)
		if err != nil {
			_ = rdb.Close()
			return nil, err
		}
		return &locker{
			acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
				lk, err := c.Lock(ctx, key)
				if err != nil {
					return nil, err
				}
				return lk.Unlock, nil
			},
			close: func() error { return errors.Join(c.Close(), rdb.Close()) },
		}, nil
	}
}

// errNotHeld is a release that found the lock gone or taken.
var errNotHeld = errors.New("release: the lock was not held any more")

func redsyncOpen(opts ...redsync.Option) func(string, *benchkit.RoundTripCounter) (*locker, error) {
	return func(addr string, trips *benchkit.RoundTripCounter) (*locker, error) {
		rdb := goRedis(addr, trips)
		rs := redsync.New(goredis.NewPool(rdb))
		return &locker{
			acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
				m := rs.NewMutex(key, opts...) // a Mutex is not safe for concurrent use
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error {
					ok, err := m.UnlockContext(ctx)
					if err == nil && !ok {
						err = errNotHeld
					}
					return err
				}, nil
			},
			close: rdb.Close,
		}, nil
	}
}

// bsmOpen: with retry nil, the default NoRetry and a caller loop that
// calls Obtain again at once until ctx ends.
func bsmOpen(retry func() redislock.RetryStrategy) func(string, *benchkit.RoundTripCounter) (*locker, error) {
	return func(addr string, trips *benchkit.RoundTripCounter) (*locker, error) {
		rdb := goRedis(addr, trips)
		c := redislock.New(rdb)
		return &locker{
			acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
				var opt *redislock.Options
				if retry != nil {
					opt = &redislock.Options{RetryStrategy: retry()}
				}
				for {
					l, err := c.Obtain(ctx, key, bsmTTL, opt)
					if err == nil {
						return l.Release, nil
					}
					if retry == nil && errors.Is(err, redislock.ErrNotObtained) && ctx.Err() == nil {
						continue
					}
					return nil, err
				}
			},
			close: rdb.Close,
		}, nil
	}
}

// simplestRelease deletes the key only if it still holds our token.
var simplestRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`)

// simplestOpen is the reference pair: one SET NX PX to acquire, one
// EVALSHA to release, on the same client settings as bsmOpen.
func simplestOpen(addr string, trips *benchkit.RoundTripCounter) (*locker, error) {
	rdb := goRedis(addr, trips)
	return &locker{
		acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
			var b [16]byte
			_, _ = rand.Read(b[:]) // never fails
			token := base64.RawURLEncoding.EncodeToString(b[:])
			for {
				err := rdb.Do(ctx, "set", key, token, "nx", "px", bsmTTL.Milliseconds()).Err()
				switch {
				case errors.Is(err, redis.Nil) && ctx.Err() == nil:
					continue // not obtained: try again at once
				case errors.Is(err, redis.Nil):
					return nil, ctx.Err()
				case err != nil:
					return nil, err
				}
				return func(ctx context.Context) error {
					n, err := simplestRelease.Run(ctx, rdb, []string{key}, token).Int64()
					if err == nil && n != 1 {
						err = errNotHeld
					}
					return err
				}, nil
			}
		},
		close: rdb.Close,
	}, nil
}

// countingClient counts the round trips rueidislock makes: every Do or
// DoMulti call (a script's EVALSHA and its EVAL fallback are two).
type countingClient struct {
	rueidis.Client
	trips *benchkit.RoundTripCounter
}

func (c countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.trips.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countingClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.trips.Add(1)
	return c.Client.DoMulti(ctx, cmds...)
}

func (c countingClient) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.trips.Add(1) // may be served locally; rueidislock does not use it
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c countingClient) DoMultiCache(ctx context.Context, cmds ...rueidis.CacheableTTL) []rueidis.RedisResult {
	c.trips.Add(1)
	return c.Client.DoMultiCache(ctx, cmds...)
}

func (c countingClient) DoStream(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResultStream {
	c.trips.Add(1)
	return c.Client.DoStream(ctx, cmd)
}

func (c countingClient) DoMultiStream(ctx context.Context, cmds ...rueidis.Completed) rueidis.MultiRedisResultStream {
	c.trips.Add(1)
	return c.Client.DoMultiStream(ctx, cmds...)
}

func rueidisOpen(opt rueidislock.LockerOption) func(string, *benchkit.RoundTripCounter) (*locker, error) {
	return func(addr string, trips *benchkit.RoundTripCounter) (*locker, error) {
		o := opt
		o.ClientOption.InitAddress = []string{addr}
		o.ClientBuilder = func(co rueidis.ClientOption) (rueidis.Client, error) {
			c, err := rueidis.NewClient(co)
			if err != nil {
				return nil, err
			}
			return countingClient{Client: c, trips: trips}, nil
		}
		lk, err := rueidislock.NewLocker(o)
		if err != nil {
			return nil, err
		}
		return &locker{
			acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
				_, cancel, err := lk.WithContext(ctx, key)
				if err != nil {
					return nil, err
				}
				// The lock is released by cancel, which waits for the DEL
				// scripts and takes no context: bound the wait ourselves.
				return func(ctx context.Context) error {
					done := make(chan struct{})
					go func() { cancel(); close(done) }()
					select {
					case <-done:
						return nil
					case <-ctx.Done():
						return fmt.Errorf("release: cancel did not return: %w", ctx.Err())
					}
				}, nil
			},
			close: func() error { lk.Close(); return nil },
		}, nil
	}
}
