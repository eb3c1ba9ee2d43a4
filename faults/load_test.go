package faults

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/probe"
)

// CPU starvation as a fault dimension. A scenario with a Load runs its
// histories with a CPU hog beside the clients: busy processes (the test
// binary re-executed, GOMAXPROCS=1) and busy goroutines in the test process
// itself, each spinning for Duty of every 10ms period; child workers run
// with GOMAXPROCS=1 meanwhile. On a machine that is otherwise idle, this is
// what makes a holder's goroutines (its watchdog, its timers, the
// notifier, a waiter) run late, as they do on a busy one.

// Load is how much CPU a history's hog takes.
type Load struct {
	Procs      int     // busy processes
	Goroutines int     // busy goroutines in the test process
	Duty       float64 // the fraction of each period spent spinning (0..1)
	// Pauses: scheduler pauses injected at the engine's pause points
	// (see pausePoints), as a GC or a preempted goroutine would stall them.
	Pauses bool
}

func (l Load) zero() bool { return l.Procs == 0 && l.Goroutines == 0 && !l.Pauses }

// String is the load column of the report: "-", or e.g. "2p+2g@80%" with
// "+pauses".
func (l Load) String() string {
	if l.zero() {
		return "-"
	}
	s := ""
	if l.Procs > 0 || l.Goroutines > 0 {
		s = fmt.Sprintf("%dp+%dg@%d%%", l.Procs, l.Goroutines, int(l.Duty*100+0.5))
	}
	if l.Pauses {
		if s != "" {
			s += "+"
		}
		s += "pauses"
	}
	return s
}

const hogPeriod = 10 * time.Millisecond

// spin busies one thread for duty of every period until stop is set.
func spin(duty float64, stop *atomic.Bool) {
	busy := time.Duration(float64(hogPeriod) * duty)
	x := uint64(1)
	for !stop.Load() {
		for end := time.Now().Add(busy); time.Now().Before(end); {
			for range 1000 {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}
		if idle := hogPeriod - busy; idle > 0 {
			time.Sleep(idle)
		}
	}
	runtime.KeepAlive(x)
}

// hogMain is the life of a hog process: spin until killed (or until its
// parent is gone: it polls its parent pid).
func hogMain(duty float64) int {
	parent := os.Getppid()
	var stop atomic.Bool
	go func() {
		for range time.Tick(200 * time.Millisecond) {
			if os.Getppid() != parent {
				stop.Store(true)
				return
			}
		}
	}()
	spin(duty, &stop)
	return 0
}

// startLoad starts the hog of l and returns the function that stops it.
func startLoad(l Load) (stop func(), err error) {
	if l.Procs == 0 && l.Goroutines == 0 {
		return func() {}, nil
	}
	var flag atomic.Bool
	var wg sync.WaitGroup
	for range l.Goroutines {
		wg.Go(func() { spin(l.Duty, &flag) })
	}
	var cmds []*exec.Cmd
	js, _ := json.Marshal(childConfig{Role: "hog", Duty: l.Duty})
	for range l.Procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+string(js), "GOMAXPROCS=1", "GORACE=atexit_sleep_ms=0")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			flag.Store(true)
			for _, c := range cmds {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
			return nil, err
		}
		cmds = append(cmds, cmd)
	}
	return func() {
		flag.Store(true)
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		wg.Wait()
	}, nil
}

// childEnvFor is what a child worker's environment adds under load l.
func childEnvFor(l Load) []string {
	if l.Procs == 0 && l.Goroutines == 0 {
		return nil
	}
	return []string{"GOMAXPROCS=1"}
}

// pauseMax: the longest scheduler pause injected at each of the engine's
// pause points (a GC pause or a preempted goroutine); some exceed a short
// TTL or PickupTimeout on purpose.
var pauseMax = map[string]time.Duration{
	probe.AfterGrant:          150 * time.Millisecond,
	probe.BeforeWithdraw:      100 * time.Millisecond,
	probe.HandoffReceived:     60 * time.Millisecond,
	probe.BeforeConfirm:       400 * time.Millisecond,
	probe.WatchdogBeforeBatch: 100 * time.Millisecond,
	probe.WatchdogAfterBatch:  100 * time.Millisecond,
	probe.BeforeRelease:       60 * time.Millisecond,
}

// pauseRate is the probability that a pause point pauses.
const pauseRate = 0.1

// startPauses injects scheduler pauses at random points into the engine's
// goroutines (watchdog, notifier, waiters, acquire and release paths) for
// the history of h, seeded from it, and returns the function that stops
// them; their count goes into the report.
func startPauses(h *harness) (stop func()) {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(h.seed(), 0x9a05e))
	var n atomic.Int64
	restore := probe.Set(func(name, key string) {
		mu.Lock()
		d := time.Duration(0)
		if rng.Float64() < pauseRate {
			d = time.Duration(rng.Int64N(int64(pauseMax[name]) + 1))
		}
		mu.Unlock()
		if d > 0 {
			n.Add(1)
			start := clock.Now()
			time.Sleep(d)
			h.nem.KeySpan(key, "pause "+name, start, clock.Now())
		}
	})
	return func() {
		restore()
		h.mu.Lock()
		h.extra.Pauses += int(n.Load())
		h.mu.Unlock()
	}
}

// stallTick and stallMin: the stall watcher ticks every stallTick; a tick
// later than stallMin is a stall of the whole test process.
const (
	stallTick = 2 * time.Millisecond
	stallMin  = 15 * time.Millisecond
)

// watchStalls records, for the history of h, the spans in which the test
// process was not scheduled (stallProc); it returns the function that
// stops it. The spans are what a busy machine does to every goroutine of
// the process: R2 and L1 do not count them against the library.
func watchStalls(h *harness) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		last := time.Now()
		t := time.NewTicker(stallTick)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			now := time.Now()
			if gap := now.Sub(last); gap > stallMin {
				h.nem.Span(kindPause, stallProc, "test process not scheduled", clock.At(last.Add(stallTick)), clock.At(now))
			}
			last = now
		}
	})
	return func() { close(done); wg.Wait() }
}
