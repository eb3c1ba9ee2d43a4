package faults

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestSoak is the long tier, every row under CPU load: a seeded random
// mix of every self-healing server fault of the quick tier (network
// latency, blackholes and resets through a proxy on every lock connection;
// DEBUG SLEEP, CLIENT PAUSE and SIGSTOP of the server; SIGSTOP and SIGKILL
// of child holders) over a contended, fenced workload; and every primitive
// (exclusive, reentrant, shared, semaphore with SetLimit, multi-key,
// legacy, Counter) under the random command-fault schedule plus proxy
// resets and server stalls, with scheduler pauses at the engine's pause
// points. One history per round, until DLOCK_SOAK_DURATION (default 10m,
// split between the rows) is spent. Then one 30 s live reshard of a
// 3-master Cluster: 16 workers on 64 locks while their slots move. Every invariant must hold: the mix
// leaves out the documented limits (restarts without persistence, power
// loss). Run it with DLOCK_SOAK=1 (or -soak); DLOCK_SEED reproduces a
// run's schedule (not the machine's load).
func TestSoak(t *testing.T) {
	if !soakEnabled() {
		t.Skip("the soak runs with DLOCK_SOAK=1 or -soak")
	}
	d := 10 * time.Minute
	if v := os.Getenv("DLOCK_SOAK_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("DLOCK_SOAK_DURATION: %v", err)
		}
	}
	rounds := int(d / 2 / (7 * time.Second))
	if v := os.Getenv("DLOCK_SOAK_ROUNDS"); v != "" {
		rounds, _ = strconv.Atoi(v)
	}
	loaded := func(p *params) {
		underLoad(p)
		p.L2Bound = 3 * time.Second
	}
	for _, sc := range []scenario{
		{topo: "single", name: "soak random mix", run: soakRound, params: loaded,
			load: Load{Procs: 1, Goroutines: 1, Duty: 0.6},
			note: "seeded random mix of every self-healing server fault"},
		{topo: "single", name: "soak primitives, cmd faults", run: cmdServerMix(5*time.Second, defaultSchedule),
			params: loaded, load: Load{Procs: 2, Goroutines: 2, Duty: 0.8, Pauses: true},
			note: "every primitive under random command faults, proxy resets and server stalls"},
	} {
		t.Run(sc.name, func(t *testing.T) { runScenario(t, sc, max(rounds, 1)) })
	}
	// One 30 s live reshard (the quick tier has a 4 s one).
	sc := reshardScenario("live reshard, soak", reshardLocksSoak)
	t.Run(sc.name, func(t *testing.T) { runScenario(t, sc, 1) })
}

// soakRound is one history: 6 workers on 3 Clients, each Client behind
// its own proxy, 2 keys, TTL 400ms, for 5s, while the nemesis injects
// random faults, one at a time, each healing itself.
func soakRound(h *harness) {
	ctx := h.t.Context()
	keys := []string{h.key("a"), h.key("b")}
	var proxies []*redistest.Proxy
	var nodes []*node
	for range 3 {
		px := redistest.NewProxy(h.t, h.lock.Addr())
		proxies = append(proxies, px)
		nodes = append(nodes, h.node(h.client(px.Addr(), false), dlock.Options{
			WaiterLease: 900 * time.Millisecond, PickupTimeout: 300 * time.Millisecond, RetryInterval: 300 * time.Millisecond}))
	}
	stop := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	for i := range 6 {
		w := h.worker(nodes[i%len(nodes)], true)
		rng := rand.New(rand.NewPCG(h.rng.Uint64(), uint64(i)))
		wg.Go(func() {
			for time.Now().Before(stop) {
				wait := time.Duration(0)
				if rng.IntN(4) > 0 {
					wait = time.Duration(200+rng.IntN(800)) * time.Millisecond
				}
				w.Cycle(ctx, keys[rng.IntN(len(keys))], 400*time.Millisecond, wait, 1+rng.IntN(3),
					time.Duration(rng.IntN(40))*time.Millisecond)
			}
		})
	}
	admin := h.client(h.lock.Addr(), true)
	for time.Now().Before(stop.Add(-time.Second)) {
		sleep(time.Duration(100+h.rng.IntN(300)) * time.Millisecond)
		d := time.Duration(100+h.rng.IntN(500)) * time.Millisecond
		px := proxies[h.rng.IntN(len(proxies))]
		switch h.rng.IntN(8) {
		case 0:
			h.nem.Do(fmt.Sprintf("latency jitter 0-30ms for %v", d), func() {
				for end := time.Now().Add(d); time.Now().Before(end); sleep(20 * time.Millisecond) {
					px.SetLatency(time.Duration(h.rng.IntN(31)) * time.Millisecond)
				}
				px.SetLatency(0)
			})
		case 1:
			h.nem.Do(fmt.Sprintf("blackhole %v", d), func() {
				px.Blackhole(true)
				sleep(d)
				px.Blackhole(false)
				px.CutAll()
			})
		case 2:
			h.nem.Do("reset all connections", px.CutAll)
		case 3:
			h.nem.Do(fmt.Sprintf("DEBUG SLEEP %v", d), func() {
				_ = admin.Do(ctx, "debug", "sleep", fmt.Sprintf("%.3f", d.Seconds())).Err()
			})
		case 4:
			h.nem.Do(fmt.Sprintf("CLIENT PAUSE %v WRITE", d), func() {
				_ = admin.Do(ctx, "client", "pause", d.Milliseconds(), "write").Err()
				sleep(d)
			})
		case 5:
			h.nem.Do(fmt.Sprintf("SIGSTOP redis-server %v", d), func() {
				_ = h.lock.Pause()
				sleep(d)
				_ = h.lock.Resume()
			})
		case 6:
			soakPausedHolder(h, keys[h.rng.IntN(len(keys))])
		case 7:
			soakKilledHolder(h, keys[h.rng.IntN(len(keys))])
		}
	}
	wg.Wait()
}

// soakPausedHolder: a child holder is stopped before a write for 1-3 TTLs.
func soakPausedHolder(h *harness, k string) {
	c := h.spawn(childConfig{Role: "holder", LockAddr: h.lock.Addr(), ResAddr: resSrv.Addr(), Key: k,
		TTL: 400 * time.Millisecond, Wait: 2 * time.Second, Writes: 2, Hold: 10 * time.Millisecond, PauseAt: 1, Fenced: true})
	e := <-c.marks
	if e.Note != "acquired" {
		c.wait(10 * time.Second)
		return
	}
	if c.nextMark(5*time.Second) != "before-write" { // lost before its second write
		c.wait(10 * time.Second)
		return
	}
	since := c.stop()
	sleep(time.Duration(400+h.rng.IntN(800)) * time.Millisecond)
	c.cont(since, "go")
	c.wait(10 * time.Second)
}

// soakKilledHolder: a child holder is killed while it holds.
func soakKilledHolder(h *harness, k string) {
	c := h.spawn(childConfig{Role: "squatter", LockAddr: h.lock.Addr(), ResAddr: resSrv.Addr(), Key: k,
		TTL: 400 * time.Millisecond, Wait: 2 * time.Second, PauseAt: -1, Fenced: true})
	e := <-c.marks
	if e.Note != "acquired" {
		c.wait(10 * time.Second)
		return
	}
	c.waitMark("holding", 5*time.Second)
	sleep(time.Duration(h.rng.IntN(300)) * time.Millisecond)
	c.kill()
}
