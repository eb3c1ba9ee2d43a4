// Package benchkit measures lock implementations under contention: many
// clients, each with its own connections as separate processes would have,
// competing for a few keys, each holding the lock for a fixed time.
//
// The engine knows nothing about any particular lock: a client is an
// Acquire function. It reports what matters when comparing locks:
// critical sections per second, hand-off latency (one holder's release to
// the next holder's acquire), Redis commands per critical section (from
// INFO commandstats, which counts commands called inside scripts too),
// fairness across clients, overlapping critical sections (must be 0), and
// the PING round trip measured in the same run, for scale.
//
// It is used by `dlock bench` and meant to be reused by comparison
// benchmarks against other lock libraries.
package benchkit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Acquire takes the lock on key, waiting until it is free or ctx ends, and
// returns the function that releases it. It is called by one client
// goroutine at a time.
type Acquire func(ctx context.Context, key string) (release func(context.Context) error, err error)

// Client is one contender: its Acquire function and what to close after
// the run (nil: nothing).
type Client struct {
	Acquire Acquire
	Close   func() error
}

// Config describes one run.
type Config struct {
	// Clients is the number of contending clients. Default: 8.
	Clients int
	// NewClient builds client i (0 <= i < Clients). Give each its own
	// connections, as separate processes would have. Required.
	NewClient func(i int) (Client, error)
	// Keys are the lock keys; each critical section picks one at random.
	// Required.
	Keys []string
	// Hold is how long each critical section lasts (a sleep). Default: 0.
	Hold time.Duration
	// Duration is how long clients start new acquisitions. Default: 3s.
	Duration time.Duration
	// Redis, if set, is used to count commands (INFO commandstats on every
	// master, before and after) and to measure PING round trips. Commands
	// are counted server-wide: traffic of other applications on the same
	// server is counted too. INFO and PING themselves are not counted.
	Redis redis.UniversalClient
	// ReleaseTimeout bounds each release. Default: 5s.
	ReleaseTimeout time.Duration
	// Progress, if set, is called about every 200ms while clients run,
	// with the time elapsed and the critical sections completed so far.
	Progress func(elapsed time.Duration, sections int64)

	// KeyPerClient makes client i use Keys[i%len(Keys)] for every critical
	// section instead of a random key. With at least as many keys as
	// clients no two clients ever want the same key: the uncontended case.
	// Default: false.
	KeyPerClient bool

	// Drain runs the clients in rounds instead of letting each loop on its
	// own: at the start of a round every client calls Acquire at the same
	// moment, each completes exactly one critical section, and the next
	// round starts when all are done. Every release but a round's last
	// then has waiters and nobody competes again after releasing, so
	// barging is impossible and the hand-off is measured on its own.
	// Rounds start until Duration has passed; the last one may run past it
	// (at most RoundTimeout). Default: false.
	Drain bool
	// RoundTimeout bounds each drain round: its Acquire calls get a context
	// that ends RoundTimeout after the round started, and a client still
	// without the lock then is counted in Result.Missed. Default: 10s.
	RoundTimeout time.Duration

	// RoundTrips, if set, is read when counting starts (with the first
	// INFO commandstats) and after the clients stopped; the difference is
	// Result.RoundTrips. For go-redis clients add one RoundTripCounter to
	// all of them and pass its Load.
	RoundTrips func() int64
}

// Result is what a run measured.
type Result struct {
	Clients   int
	Keys      int
	Hold      time.Duration
	Elapsed   time.Duration // from the start to the last client's stop
	Sections  int64         // completed critical sections
	PerClient []int64       // critical sections per client

	// Hand-off: from the moment a holder starts releasing to the moment the
	// next holder's Acquire returns, for acquirers that were already
	// waiting when the release started.
	Handoff Percentiles
	// Acquire: from the call to Acquire to its return, every acquisition.
	Acquire Percentiles

	// Commands is the number of Redis commands the run caused (-1: not
	// measured), ByCommand the same per command name.
	Commands  int64
	ByCommand map[string]int64
	// ServerTimeByCommand is the server's time inside each command during
	// the run (INFO commandstats usec; INFO and PING left out). A script's
	// EVALSHA, EVAL or FCALL includes the time of the commands it calls,
	// which appear under their own names too.
	ServerTimeByCommand map[string]time.Duration

	// ServerCPU is the CPU time (user + system) the Redis server used during
	// the run, from INFO cpu (-1: not measured). Everything else the server
	// did meanwhile counts too (PINGs, INFO).
	ServerCPU time.Duration

	// Overlaps counts critical sections that began while another client
	// was inside one on the same key. Anything but 0 is a broken lock.
	Overlaps int64

	AcquireErrors int64 // Acquire failures other than the end of the run
	ReleaseErrors int64
	FirstError    error // the first acquire or release error, if any

	// PING round trips: while the clients run, and before they start.
	Ping     Percentiles
	PingIdle Percentiles

	// RoundTrips is the number of client round trips the run caused, as
	// counted by Config.RoundTrips (-1: not measured).
	RoundTrips int64

	// Rounds is the number of drain rounds run (Config.Drain), Missed the
	// number of acquisitions given up because their round timed out.
	Rounds int
	Missed int64
}

// PerSecond is critical sections per second.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Sections) / r.Elapsed.Seconds()
}

// CommandsPerSection is Redis commands per critical section, or -1 if not
// measured.
func (r Result) CommandsPerSection() float64 {
	if r.Commands < 0 || r.Sections == 0 {
		return -1
	}
	return float64(r.Commands) / float64(r.Sections)
}

// ServerCPUPerSection is the Redis server's CPU time per critical section,
// or -1 if not measured.
func (r Result) ServerCPUPerSection() time.Duration {
	if r.ServerCPU < 0 || r.Sections == 0 {
		return -1
	}
	return r.ServerCPU / time.Duration(r.Sections)
}

// RoundTripsPerSection is client round trips per critical section, or -1
// if not measured.
func (r Result) RoundTripsPerSection() float64 {
	if r.RoundTrips < 0 || r.Sections == 0 {
		return -1
	}
	return float64(r.RoundTrips) / float64(r.Sections)
}

// Fairness returns the fewest and the most critical sections any client
// completed.
func (r Result) Fairness() (lowest, highest int64) {
	if len(r.PerClient) == 0 {
		return 0, 0
	}
	return slices.Min(r.PerClient), slices.Max(r.PerClient)
}

// keyState is the engine's own view of one key, shared by all clients.
type keyState struct {
	inside      atomic.Int32 // clients inside a critical section on the key
	lastRelease atomic.Int64 // ns since the run's start when the last release began
}

// Run runs the benchmark. It returns an error if the configuration is
// invalid, a client cannot be built, or ctx ends before the run does;
// failures of single acquisitions or releases are counted in the Result.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Clients == 0 {
		cfg.Clients = 8
	}
	if cfg.Duration == 0 {
		cfg.Duration = 3 * time.Second
	}
	if cfg.ReleaseTimeout == 0 {
		cfg.ReleaseTimeout = 5 * time.Second
	}
	if cfg.RoundTimeout == 0 {
		cfg.RoundTimeout = 10 * time.Second
	}
	switch {
	case cfg.Clients < 1:
		return Result{}, errors.New("benchkit: Clients must be at least 1")
	case cfg.NewClient == nil:
		return Result{}, errors.New("benchkit: NewClient is required")
	case len(cfg.Keys) == 0:
		return Result{}, errors.New("benchkit: at least one key is required")
	case cfg.Duration < 0 || cfg.Hold < 0 || cfg.RoundTimeout < 0:
		return Result{}, errors.New("benchkit: negative Duration, Hold or RoundTimeout")
	}

	clients := make([]Client, 0, cfg.Clients)
	defer func() {
		for _, c := range clients {
			if c.Close != nil {
				_ = c.Close()
			}
		}
	}()
	for i := range cfg.Clients {
		c, err := cfg.NewClient(i)
		if err != nil {
			return Result{}, fmt.Errorf("benchkit: client %d: %w", i, err)
		}
		clients = append(clients, c)
	}

	// Warm up: every client takes and releases a private key once, so
	// connections are dialled and scripts loaded before counting starts.
	for i, c := range clients {
		release, err := c.Acquire(ctx, fmt.Sprintf("%s:warmup:%d", cfg.Keys[0], i))
		if err != nil {
			return Result{}, fmt.Errorf("benchkit: warm-up of client %d: %w", i, err)
		}
		if err := release(ctx); err != nil {
			return Result{}, fmt.Errorf("benchkit: warm-up of client %d: %w", i, err)
		}
	}

	res := Result{Clients: cfg.Clients, Keys: len(cfg.Keys), Hold: cfg.Hold, Commands: -1, RoundTrips: -1, ServerCPU: -1}
	if cfg.Redis != nil {
		res.PingIdle = pingSamples(ctx, cfg.Redis, 50, 0)
	}
	var before map[string]CommandStat
	cpuBefore := time.Duration(-1)
	if cfg.Redis != nil {
		if m, err := CommandStats(ctx, cfg.Redis); err == nil {
			before = m
		}
		if d, err := ServerCPU(ctx, cfg.Redis); err == nil {
			cpuBefore = d
		}
	}
	var tripsBefore int64
	if cfg.RoundTrips != nil {
		tripsBefore = cfg.RoundTrips()
	}

	keys := make([]*keyState, len(cfg.Keys))
	for i := range keys {
		keys[i] = new(keyState)
	}
	var (
		sections  atomic.Int64
		overlaps  atomic.Int64
		acqErrs   atomic.Int64
		relErrs   atomic.Int64
		missed    atomic.Int64
		errOnce   sync.Once
		firstErr  error
		perClient = make([]int64, len(clients))
		handoffs  = make([][]time.Duration, len(clients))
		acquires  = make([][]time.Duration, len(clients))
		rnds      = make([]*rand.Rand, len(clients))
	)
	noteErr := func(err error) { errOnce.Do(func() { firstErr = err }) }

	start := time.Now()
	since := func() int64 { return int64(time.Since(start)) }
	runCtx, cancel := context.WithDeadline(ctx, start.Add(cfg.Duration))
	defer cancel()
	// The samplers run until the clients are done (in drain mode the last
	// round may run past Duration).
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()

	// PING sampler, on its own connection(s), while clients run.
	pingDone := make(chan Percentiles, 1)
	if cfg.Redis != nil {
		go func() { pingDone <- pingSamples(sampleCtx, cfg.Redis, -1, 5*time.Millisecond) }()
	} else {
		pingDone <- Percentiles{}
	}

	// Progress reporter.
	progDone := make(chan struct{})
	if cfg.Progress != nil {
		go func() {
			defer close(progDone)
			t := time.NewTicker(200 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-sampleCtx.Done():
					return
				case <-t.C:
					cfg.Progress(time.Since(start), sections.Load())
				}
			}
		}()
	} else {
		close(progDone)
	}

	for i := range clients {
		rnds[i] = rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
	}
	// section makes client i acquire a key, hold it and release it once.
	// It returns false if Acquire failed (the error is counted unless
	// waitCtx ended).
	section := func(waitCtx context.Context, i int) bool {
		ki := 0
		switch {
		case cfg.KeyPerClient:
			ki = i % len(keys)
		case len(keys) > 1:
			ki = rnds[i].IntN(len(keys))
		}
		ks := keys[ki]
		t0 := since()
		release, err := clients[i].Acquire(waitCtx, cfg.Keys[ki])
		if err != nil {
			if waitCtx.Err() != nil {
				return false
			}
			acqErrs.Add(1)
			noteErr(fmt.Errorf("acquire: %w", err))
			time.Sleep(time.Millisecond) // don't spin on a broken Redis
			return false
		}
		t1 := since()
		acquires[i] = append(acquires[i], time.Duration(t1-t0))
		if rel := ks.lastRelease.Load(); rel > t0 {
			handoffs[i] = append(handoffs[i], time.Duration(t1-rel))
		}
		if ks.inside.Add(1) > 1 {
			overlaps.Add(1)
		}
		if cfg.Hold > 0 {
			time.Sleep(cfg.Hold)
		}
		ks.inside.Add(-1)
		ks.lastRelease.Store(since())
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ReleaseTimeout)
		err = release(rctx)
		rcancel()
		if err != nil {
			relErrs.Add(1)
			noteErr(fmt.Errorf("release: %w", err))
			return true // the critical section ran, but is not counted
		}
		perClient[i]++
		sections.Add(1)
		return true
	}

	var wg sync.WaitGroup
	if !cfg.Drain {
		for i := range clients {
			wg.Go(func() {
				for runCtx.Err() == nil {
					section(runCtx, i)
				}
			})
		}
		wg.Wait()
	} else {
		for runCtx.Err() == nil {
			roundCtx, roundCancel := context.WithTimeout(ctx, cfg.RoundTimeout)
			begin := make(chan struct{})
			for i := range clients {
				wg.Go(func() {
					<-begin
					for !section(roundCtx, i) {
						if roundCtx.Err() != nil {
							if ctx.Err() == nil {
								missed.Add(1)
								noteErr(fmt.Errorf("acquire: drain round timed out after %v", cfg.RoundTimeout))
							}
							return
						}
					}
				})
			}
			close(begin)
			wg.Wait()
			roundCancel()
			res.Rounds++
		}
	}
	res.Elapsed = time.Since(start)
	cancel()
	if cfg.RoundTrips != nil {
		res.RoundTrips = cfg.RoundTrips() - tripsBefore
	}
	stopSampling()
	<-progDone
	res.Ping = <-pingDone
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}

	if cpuBefore >= 0 {
		if d, err := ServerCPU(ctx, cfg.Redis); err == nil {
			res.ServerCPU = d - cpuBefore
		}
	}
	if before != nil {
		if after, err := CommandStats(ctx, cfg.Redis); err == nil {
			res.Commands, res.ByCommand, res.ServerTimeByCommand = commandDelta(before, after)
		}
	}

	res.Sections = sections.Load()
	res.PerClient = perClient
	res.Overlaps = overlaps.Load()
	res.AcquireErrors = acqErrs.Load()
	res.ReleaseErrors = relErrs.Load()
	res.Missed = missed.Load()
	res.FirstError = firstErr
	res.Handoff = NewPercentiles(slices.Concat(handoffs...))
	res.Acquire = NewPercentiles(slices.Concat(acquires...))
	return res, nil
}

// commandDelta is what ran between two INFO commandstats readings, INFO
// and PING left out: the commands, their calls and their server time by
// name.
func commandDelta(before, after map[string]CommandStat) (int64, map[string]int64, map[string]time.Duration) {
	var total int64
	calls, times := map[string]int64{}, map[string]time.Duration{}
	for name, a := range after {
		if name == "info" || name == "ping" {
			continue
		}
		if d := a.Calls - before[name].Calls; d > 0 {
			calls[name] = d
			total += d
			times[name] = time.Duration(a.Usec-before[name].Usec) * time.Microsecond
		}
	}
	return total, calls, times
}

// pingSamples sends PINGs to rdb: n of them back to back (n >= 0), or,
// with n < 0, one every interval until ctx ends.
func pingSamples(ctx context.Context, rdb redis.UniversalClient, n int, interval time.Duration) Percentiles {
	var s []time.Duration
	for i := 0; n < 0 || i < n; i++ {
		if ctx.Err() != nil {
			break
		}
		t := time.Now()
		if err := rdb.Ping(ctx).Err(); err == nil {
			s = append(s, time.Since(t))
		}
		if interval > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}
	return NewPercentiles(s)
}
