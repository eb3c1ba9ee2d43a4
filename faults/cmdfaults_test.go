package faults

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Command-level faults: a faultcmd.Injector on a Client's own go-redis
// client drops a reply after the command ran, fails a command before it is
// sent, delays one, or holds one until another has completed. The random
// schedule (seeded from the history's seed) runs every primitive under
// these; the named scenarios (defects_test.go) aim one rule at the step
// where a defect of that class lived.

// cmdSchedule is the random schedule of the command-fault rows: per
// command, the probability of each fault.
type cmdSchedule struct {
	drop, fail, delay float64
	maxDelay          time.Duration
	match             faultcmd.Match
}

var defaultSchedule = cmdSchedule{drop: 0.03, fail: 0.03, delay: 0.05, maxDelay: 60 * time.Millisecond}

// cmdClient returns a go-redis client of the lock server with an Injector
// (its faults are logged into the history at its end).
func (h *harness) cmdClient(addr string) (*redis.Client, *faultcmd.Injector) {
	rdb := h.client(addr, true)
	inj := faultcmd.New()
	rdb.AddHook(inj)
	h.mu.Lock()
	h.injectors = append(h.injectors, inj)
	h.mu.Unlock()
	return rdb, inj
}

// cmdNode returns a recorded Client of the lock server whose commands go
// through an Injector.
func (h *harness) cmdNode(opts dlock.Options) (*node, *faultcmd.Injector) {
	rdb, inj := h.cmdClient(h.lock.Addr())
	return h.node(rdb, opts), inj
}

// schedule starts s on inj, seeded from the history.
func (h *harness) schedule(inj *faultcmd.Injector, s cmdSchedule) {
	inj.SetRandom(&faultcmd.Random{Seed: h.seed(), Match: s.match, DropReply: s.drop, FailBefore: s.fail,
		Delay: s.delay, MaxDelay: s.maxDelay})
}

// logInjected records what the injectors did as faults of the history,
// and counts them. It stops them first (the final reads are not faulted).
func (h *harness) logInjected() map[string]int {
	h.mu.Lock()
	injs := h.injectors
	h.injectors = nil
	h.mu.Unlock()
	if len(injs) == 0 {
		return nil
	}
	counts := map[string]int{}
	for _, inj := range injs {
		inj.SetEnabled(false)
		for _, e := range inj.Log() {
			counts[e.Action.String()]++
			t := clock.At(e.At)
			start := t
			if d, err := time.ParseDuration(strings.TrimPrefix(e.Outcome, "sent after ")); err == nil {
				start = t - int64(d) // a delay is logged when it ends
			}
			h.nem.KeySpan(e.Command.Key, fmt.Sprintf("%s [%s] %s: %s", e.Action, e.Rule, e.Command, e.Outcome), start, t)
		}
	}
	return counts
}

// cmdMix: the primitives mix (the parts in only) on 3 Clients, each under
// the random command-fault schedule.
func cmdMix(d time.Duration, s cmdSchedule, only ...string) func(h *harness) {
	return func(h *harness) {
		var nodes []*node
		for range 3 {
			n, inj := h.cmdNode(dlock.Options{})
			h.schedule(inj, s)
			nodes = append(nodes, n)
		}
		primitivesMix(h, nodes, mixOpts{dur: d, only: only, counter: containsStr(only, "counter")})
	}
}

// cmdRedlock: 4 Redlock workers over 3 nodes, each worker's Client with an
// Injector on every node's connection, under the random schedule.
func cmdRedlock(d time.Duration, s cmdSchedule) func(h *harness) {
	return func(h *harness) {
		ctx := h.t.Context()
		_, addrs := startNodes(h, 3)
		k := h.key("k")
		stop := time.Now().Add(d)
		done := make(chan struct{})
		for i := range 4 {
			var injs []*faultcmd.Injector
			set := h.redlockNodeWith(addrs, func(c *redis.Client) {
				inj := faultcmd.New()
				c.AddHook(inj)
				h.schedule(inj, s)
				injs = append(injs, inj)
			})
			h.mu.Lock()
			h.injectors = append(h.injectors, injs...)
			h.mu.Unlock()
			w := h.redlockWorker(set)
			go func() {
				defer func() { done <- struct{}{} }()
				for time.Now().Before(stop) && ctx.Err() == nil {
					w.Cycle(ctx, k, 500*time.Millisecond, time.Duration(200+i*100)*time.Millisecond, 1, 10*time.Millisecond)
				}
			}()
		}
		for range 4 {
			<-done
		}
	}
}

// TestCommandFaults: every primitive and protocol under the random
// command-fault schedule (one history each), then all of them at once
// with server faults and a CPU hog.
func TestCommandFaults(t *testing.T) {
	for _, sc := range cmdScenarios() {
		t.Run(sc.topo+"/"+sc.name, func(t *testing.T) { runScenario(t, sc, sc.rounds) })
	}
}

func cmdScenarios() []scenario {
	const d = 1500 * time.Millisecond
	s := defaultSchedule
	note := fmt.Sprintf("random per command: drop reply %.0f%%, fail before %.0f%%, delay ≤%v %.0f%%",
		s.drop*100, s.fail*100, s.maxDelay, s.delay*100)
	row := func(name string, parts ...string) scenario {
		return scenario{topo: "single", name: "cmd faults: " + name, rounds: 1, run: cmdMix(d, s, parts...), note: note}
	}
	return []scenario{
		row("exclusive+reentrant", "x"),
		row("readers+writers", "rw"),
		row("semaphore+SetLimit", "sem"),
		row("multi-key", "multi"),
		row("legacy", "legacy"),
		row("Counter", "counter"),
		{topo: "redlock", name: "cmd faults: redlock", rounds: 1, run: cmdRedlock(d, s), note: note},
		{topo: "single", name: "cmd+server faults, hog: all", rounds: 1, run: cmdServerMix(2*time.Second, s),
			load: Load{Procs: 1, Goroutines: 2, Duty: 0.7, Pauses: true}, params: underLoad,
			note: note + "; proxy resets, DEBUG SLEEP; CPU hog and scheduler pauses"},
	}
}

// underLoad: the bounds that hold with a CPU hog beside the clients.
func underLoad(p *params) {
	p.L1Slack = time.Second
	p.R2Slack = 500 * time.Millisecond
}

// cmdServerMix: every primitive on 3 Clients, each behind its own proxy
// and under the random schedule, while the nemesis resets the proxies'
// connections and stalls the server.
func cmdServerMix(d time.Duration, s cmdSchedule) func(h *harness) {
	return func(h *harness) {
		ctx := h.t.Context()
		var nodes []*node
		var proxies []*redistest.Proxy
		for range 3 {
			px := redistest.NewProxy(h.t, h.lock.Addr())
			proxies = append(proxies, px)
			rdb, inj := h.cmdClient(px.Addr())
			h.schedule(inj, s)
			nodes = append(nodes, h.node(rdb, dlock.Options{WaiterLease: 900 * time.Millisecond,
				PickupTimeout: 300 * time.Millisecond, RetryInterval: 300 * time.Millisecond}))
		}
		stop := time.Now().Add(d)
		rng := rand.New(rand.NewPCG(h.seed(), 5))
		done := make(chan struct{})
		go func() {
			defer close(done)
			primitivesMix(h, nodes, mixOpts{dur: d, counter: true})
		}()
		admin := h.client(h.lock.Addr(), true)
		for time.Now().Before(stop.Add(-300 * time.Millisecond)) {
			sleep(time.Duration(150+rng.IntN(250)) * time.Millisecond)
			switch rng.IntN(3) {
			case 0:
				h.nem.Do("reset all connections", proxies[rng.IntN(len(proxies))].CutAll)
			case 1:
				h.nem.Do("DEBUG SLEEP 0.2", func() { _ = admin.Do(ctx, "debug", "sleep", "0.2").Err() })
			case 2:
				px := proxies[rng.IntN(len(proxies))]
				h.nem.Do("latency 0-30ms for 300ms", func() {
					for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); sleep(20 * time.Millisecond) {
						px.SetLatency(time.Duration(rng.IntN(31)) * time.Millisecond)
					}
					px.SetLatency(0)
				})
			}
		}
		<-done
	}
}
