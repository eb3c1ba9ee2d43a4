package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// TestManyHeldLocks measures one Client holding many locks: heap per held
// lock, acquire throughput with none and with all of them held, renewals
// per second and the watchdog's spare capacity, client and redis-server
// CPU, locks lost, and Close. It runs with 2,000 locks for a few seconds
// by default (a smoke test); set DLOCK_HELD_N (e.g. 100000),
// DLOCK_HELD_FOR (e.g. 3m) and DLOCK_HELD_TTL (default 3s) for the real
// measurement, without -race:
//
//	DLOCK_HELD_N=100000 DLOCK_HELD_FOR=3m go test -run TestManyHeldLocks -v -timeout 30m .
//
// DLOCK_HELD_HOG=1 runs a CPU hog (one busy goroutine per core, at normal
// priority) beside it for the whole run.
func TestManyHeldLocks(t *testing.T) {
	n := envInt(t, "DLOCK_HELD_N", 2000)
	hold := envDuration(t, "DLOCK_HELD_FOR", 3*time.Second)
	ttl := envDuration(t, "DLOCK_HELD_TTL", 3*time.Second)
	if testing.Short() {
		t.Skip("holds many locks for a while")
	}
	if os.Getenv("DLOCK_HELD_HOG") != "" {
		stop := make(chan struct{})
		defer close(stop)
		for range runtime.NumCPU() {
			go func() {
				x := 0
				for {
					select {
					case <-stop:
						return
					default:
					}
					for i := range 1 << 16 {
						x += i
					}
				}
			}()
		}
		t.Logf("CPU hog: %d busy goroutines", runtime.NumCPU())
	}
	var behind atomic.Int64
	var phase atomic.Value // what the test is doing: each "falling behind" warning is counted under it
	phase.Store("acquire")
	var phaseMu sync.Mutex
	behindIn := map[string][]time.Duration{} // warnings per phase, at their time since the start
	var lostExpired, lostUnreachable, lostOther atomic.Int64
	var firstLoss atomic.Int64
	begin := time.Now()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	rt := &roundTrips{}
	rdb.AddHook(rt)
	c, _ := newClientOn(t, rdb, dlock.Options{Hooks: dlock.Hooks{
		Lost: func(_ context.Context, i dlock.LostInfo) {
			firstLoss.CompareAndSwap(0, int64(time.Since(begin)))
			switch {
			case errors.Is(i.Cause, dlock.ErrUnreachable):
				lostUnreachable.Add(1)
			case errors.Is(i.Cause, dlock.ErrExpired):
				lostExpired.Add(1)
			default:
				lostOther.Add(1)
			}
		},
		Behind: func(_ context.Context, i dlock.BehindInfo) {
			at := time.Since(begin)
			ph := phase.Load().(string)
			phaseMu.Lock()
			behindIn[ph] = append(behindIn[ph], at.Round(time.Second))
			phaseMu.Unlock()
			if behind.Add(1) <= 5 {
				t.Logf("behind at %s (%s): %+v", at.Round(time.Millisecond), ph, i)
			}
		},
	}})
	ctx := context.Background()
	prefix := key(t)
	if err := srv.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}

	// Acquire throughput with nothing held: a 1,000-lock sample,
	// released again, with its median and 99th percentile call. The same
	// from a second Client on its own go-redis client (its own pool and
	// registry): what the held locks cost a caller that shares only the
	// process and the server with them.
	const sample = 1000
	other, _ := newClientOn(t, redis.NewClient(&redis.Options{Addr: redisAddr}), dlock.Options{})
	type sampled struct {
		rate     float64
		p50, p99 time.Duration
	}
	rate := func(c *dlock.Client, tag string) sampled {
		locks := make([]*dlock.Lock, sample)
		took := make([]time.Duration, sample)
		start := time.Now()
		for i := range locks {
			t0 := time.Now()
			lk, err := c.TryLock(ctx, fmt.Sprintf("%s:%s:%d", prefix, tag, i), dlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			took[i] = time.Since(t0)
			locks[i] = lk
		}
		r := float64(sample) / time.Since(start).Seconds()
		for _, lk := range locks {
			_ = lk.Unlock(ctx)
		}
		slices.Sort(took)
		return sampled{r, took[sample/2], took[sample*99/100]}
	}
	phase.Store("sample, none held")
	rate(c, "warm") // the Client's first calls load scripts and dial connections: not part of either sample
	rate(other, "warm2")
	empty := rate(c, "empty")
	emptyOther := rate(other, "empty2")
	phase.Store("acquire")

	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	locks := make([]*dlock.Lock, n)
	start := time.Now()
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				lk, err := c.TryLock(ctx, fmt.Sprintf("%s:%d", prefix, i), dlock.WithTTL(ttl))
				if err != nil {
					t.Error(err)
					return
				}
				locks[i] = lk
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	acquireAll := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	heapPerLock := float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / float64(n)
	goroutinesPerLock := float64(runtime.NumGoroutine()-g0) / float64(n)

	// Hold them, measuring renewals and CPU.
	phase.Store("hold")
	s0, cpu0, rcpu0, rt0 := c.Stats(), selfCPU(), redisCPU(t, rdb), rt.n.Load()
	t0 := time.Now()
	time.Sleep(hold / 2)
	// Acquire throughput with all of them held, once renewals are steady
	// (the sample's own locks add 1% to what is held).
	phase.Store("sample, all held")
	full := rate(c, "full")
	fullOther := rate(other, "full2")
	phase.Store("hold")
	time.Sleep(time.Until(t0.Add(hold)))
	el := time.Since(t0)
	rt1 := rt.n.Load() // the sample's own round trips included: 2,000 of them (the second Client's are not counted)
	s1, cpu1, rcpu1 := c.Stats(), selfCPU(), redisCPU(t, rdb)
	renewals := float64(s1.Renewals-s0.Renewals) / el.Seconds()
	lost := 0
	for _, lk := range locks {
		if lk.Err() != nil {
			lost++
		}
	}

	// Capacity: every lock renewed once more, the way the watchdog sends
	// renewals (bulk calls in pipelines of 512, 8 at once), from outside
	// the watchdog (the replies are not applied), while the watchdog goes
	// on with its own: what both renew in that time is the capacity.
	phase.Store("burst")
	wd0 := c.Stats().Renewals
	burstTime := dlock.RenewBurst(c, locks, ttl)
	beside := float64(c.Stats().Renewals-wd0) / burstTime.Seconds()
	capacity := float64(n) / burstTime.Seconds()
	phase.Store("close")

	closeStart := time.Now()
	closeErr := c.Close()
	closeTime := time.Since(closeStart)
	left := len(rdb.Keys(ctx, prefix+":*").Val())

	t.Logf("settings: %d locks, TTL %s (renewed every %s), held %s, GOMAXPROCS %d, NumCPU %d, hog %v",
		n, ttl, ttl/3, el.Round(time.Second), runtime.GOMAXPROCS(0), runtime.NumCPU(), os.Getenv("DLOCK_HELD_HOG") != "")
	t.Logf("heap per held lock: %.0f B; goroutines per held lock: %.4f", heapPerLock, goroutinesPerLock)
	t.Logf("acquire: all %d in %s (8 goroutines); 1,000 in a row: %.0f/s with none held, %.0f/s with %d held (%.0f%%)",
		n, acquireAll.Round(time.Millisecond), empty.rate, full.rate, n, 100*full.rate/empty.rate)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	t.Logf("TryLock p50 / p99: %.0f / %.0f µs with none held, %.0f / %.0f µs with %d held; from a second Client (own go-redis client): %.0f/s, %.0f / %.0f µs with none held, %.0f/s, %.0f / %.0f µs with %d held (%.0f%%)",
		us(empty.p50), us(empty.p99), us(full.p50), us(full.p99), n,
		emptyOther.rate, us(emptyOther.p50), us(emptyOther.p99), fullOther.rate, us(fullOther.p50), us(fullOther.p99), n, 100*fullOther.rate/emptyOther.rate)
	schedule := float64(n) / (ttl / 3).Seconds()
	t.Logf("renewals: %.0f/s (schedule needs %.0f/s); capacity: one extra renewal of every lock in %s (%.0f/s) beside the watchdog's own %.0f/s: %.0f/s in all, %.1fx the schedule",
		renewals, schedule, burstTime.Round(time.Millisecond), capacity, beside, capacity+beside, (capacity+beside)/schedule)
	t.Logf("round trips per renewal interval: %.1f (each a pipeline of bulk calls, or a command)",
		float64(rt1-rt0-2*sample)/(el.Seconds()/(ttl/3).Seconds()))
	t.Logf("CPU while holding: client %.2f cores, redis-server %.2f cores (INFO used_cpu_sys+user); per renewal: client %.2f µs, redis-server %.2f µs (the two 1,000-lock samples included)",
		(cpu1-cpu0).Seconds()/el.Seconds(), (rcpu1-rcpu0).Seconds()/el.Seconds(),
		float64((cpu1-cpu0).Microseconds())/float64(s1.Renewals-s0.Renewals), float64((rcpu1-rcpu0).Microseconds())/float64(s1.Renewals-s0.Renewals))
	t.Logf("lost: %d (expired %d, unreachable %d, other %d; first %s after the start); renewal failures: %d; behind warnings: %d",
		lost, lostExpired.Load(), lostUnreachable.Load(), lostOther.Load(), time.Duration(firstLoss.Load()).Round(time.Millisecond), s1.RenewalFailures, s1.Behind)
	t.Logf("Close: %s, err %v; lock keys left in Redis: %d", closeTime.Round(time.Millisecond), closeErr, left)
	phaseMu.Lock()
	for _, ph := range []string{"sample, none held", "acquire", "hold", "sample, all held", "burst", "close"} {
		if ats := behindIn[ph]; len(ats) > 0 {
			t.Logf("behind warnings while %s: %d, at %v", ph, len(ats), ats)
		}
	}
	phaseMu.Unlock()
	if lost > 0 {
		t.Errorf("%d locks lost", lost)
	}
	if closeErr != nil {
		t.Errorf("Close: %v", closeErr)
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the server's used_cpu_sys + used_cpu_user (INFO cpu).
func redisCPU(t testing.TB, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// TestManyWaiters measures queued waiters: heap and goroutines per Lock
// call waiting in a queue, beyond the caller's own goroutine and the
// connection pool (both are warmed up before the baseline, and the keys
// are made before it). DLOCK_WAITERS sets how many (default 500), each on
// its own key held by another Client. The live heap (as the collector
// found it) is read at 5 moments
// spread over a retry interval: a waiter refreshes its queue lease every
// third of the lease, and the attempts in flight at that moment (their
// calls and replies) are counted with the waiters at rest; the median is
// the figure. DLOCK_WAITERS_PROFILE names a file to write a heap profile
// to at the first reading, and NAME.base one before the waiters start
// (with -memprofilerate=1 it attributes every byte; go tool pprof
// -sample_index=inuse_space -diff_base NAME.base NAME).
func TestManyWaiters(t *testing.T) {
	n := envInt(t, "DLOCK_WAITERS", 500)
	if testing.Short() {
		t.Skip("many waiters")
	}
	profile := func(name string) {
		f, err := os.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	}
	name := os.Getenv("DLOCK_WAITERS_PROFILE")
	var live0 uint64
	var g0, g1 int
	var perWaiter []float64
	queueWaiters(t, n, func() {
		live0 = liveHeap()
		g0 = runtime.NumGoroutine()
		if name != "" {
			profile(name + ".base")
		}
	}, func() {
		g1 = runtime.NumGoroutine()
		for i := range 5 {
			if i > 0 {
				time.Sleep(3 * time.Second / 3 / 4) // a quarter of the default WaiterLease's refresh
			}
			perWaiter = append(perWaiter, float64(int64(liveHeap())-int64(live0))/float64(n))
			if i == 0 && name != "" {
				profile(name)
			}
		}
	})
	sorted := slices.Clone(perWaiter)
	slices.Sort(sorted)
	t.Logf("%d queued waiters: heap %.0f B per waiter (median of %.0f); goroutines per waiter beyond the caller's: %.3f",
		n, sorted[len(sorted)/2], perWaiter, float64(g1-g0-n)/float64(n))
}

// liveHeap collects garbage and returns the heap it found live (what the
// waiters allocate between the collection and a read of HeapAlloc, busy
// with their retries, would count otherwise).
func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// A queued waiter at rest has no goroutine and no runtime timer of its
// own (its retry is in the watchdog's heap, served by the Client's one
// timer): the number of both stays flat however many calls wait.
func TestWaitersHaveNoTimers(t *testing.T) {
	const n = 200
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 1 // every timer made from now on is in the profile
	var g0, g1, timers int
	queueWaiters(t, n, func() {
		g0 = runtime.NumGoroutine()
	}, func() {
		g1 = runtime.NumGoroutine()
		timers = liveTimers(t)
	})
	if extra := g1 - g0 - n; extra > n/10 {
		t.Errorf("%d goroutines beyond the %d callers' while they wait", extra, n)
	}
	if timers > n/10 {
		t.Errorf("%d runtime timers made by dlock alive while %d calls wait", timers, n)
	}
	t.Logf("%d waiters: %d goroutines beyond the callers', %d live dlock timers", n, g1-g0-n, timers)
}

// queueWaiters makes n Lock calls on a Client, each on its own key held
// by another Client: before runs once the callers' goroutines, the keys
// and the connection pool are warmed up, and at runs once every call is
// queued and asleep. Then the calls are cancelled and waited for.
func queueWaiters(t *testing.T, n int, before, at func()) {
	t.Helper()
	holder, _ := newClient(t, dlock.Options{})
	c, rdb := newClient(t, dlock.Options{})
	prefix := key(t)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", prefix, i)
		if _, err := holder.TryLock(t.Context(), keys[i], dlock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	// Warm up the connection pool and the runtime (the goroutines the
	// callers reuse) with a round of n waiters on another Client over the
	// same go-redis client, and c's pub/sub connection with one waiter.
	warm, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(t.Context())
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = warm.Lock(wctx, keys[i])
		}()
	}
	waitWaiting(t, warm, n)
	cancel()
	wg.Wait()
	if err := warm.Close(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel = context.WithTimeout(t.Context(), 50*time.Millisecond)
	_, _ = c.Lock(wctx, keys[0])
	cancel()
	before()
	ctx, stop := context.WithCancel(t.Context())
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.Lock(ctx, keys[i])
		}()
	}
	waitWaiting(t, c, n)
	at()
	stop()
	wg.Wait()
}

// waitWaiting waits until n calls of c wait, and a little more (every
// one queued and asleep).
func waitWaiting(t *testing.T, c *dlock.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for c.Stats().Waiting < int64(n) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if w := c.Stats().Waiting; w < int64(n) {
		t.Fatalf("%d of %d calls waiting", w, n)
	}
}

// liveTimers counts the runtime timers made by package dlock (not its
// tests) that are still reachable. It sees those made since
// runtime.MemProfileRate was set to 1.
func liveTimers(t *testing.T) int {
	runtime.GC()
	runtime.GC() // the profile is as of the last completed cycle
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			break
		}
	}
	count := 0
	for _, r := range recs[:n] {
		if r.InUseObjects() == 0 {
			continue
		}
		timer, ours := false, false
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			switch {
			case f.Function == "time.newTimer":
				timer = true
			case strings.HasPrefix(f.Function, "github.com/dlock-go/dlock.") && !ours:
				ours = true
			}
			if !more {
				break
			}
		}
		if timer && ours {
			count += int(r.InUseObjects())
		}
	}
	if count == 0 {
		t.Log("no live dlock timers in the heap profile")
	}
	return count
}
