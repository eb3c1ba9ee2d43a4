package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/outcome"
	"github.com/redis/go-redis/v9"
)

// A live reshard: on a 3-master Cluster, workers contend for locks (a
// fenced write and a plain read-modify-write increment under each) and sell
// a Counter's stock, while every slot holding one of those locks or
// segments is moved to the next master, one after the other, the way
// `redis-cli --cluster reshard` moves a slot (redistest.MoveSlot: SETSLOT
// IMPORTING and MIGRATING, MIGRATE 10 keys at a time, SETSLOT NODE), over
// and over until the run ends. Safety is checked and asserted (S1, S2; an
// increment lost is an S2 violation; S3 below). The figures recorded: slot moves and
// keys migrated; errors that reached a caller whose ctx had time left;
// scripts that failed mid-way (on a key of a migrating slot the script did
// not declare, after writes Redis does not roll back); held
// locks lost; and the longest span a lock key had no holder while slots
// moved, and while a caller waited for it (a lock left held by nobody
// until its TTL shows there). Refusals (TRYAGAIN, ASK) are ridden out within the caller's ctx,
// so no caller meets an error other than a script's failing mid-way; that
// is asserted. Every script declares every key it touches
// (pendingDeclaredKeys), so no script fails mid-way, no held lock is lost,
// no key is blocked for a TTL and S3 holds: asserted too (a build whose
// scripts touch undeclared keys has them printed instead).

// reshardLoad sizes a live-reshard history.
type reshardLoad struct {
	locks, clients, workers int // lock keys; Clients, and workers on each
	dur, ttl                time.Duration
}

// reshardLocksQuick and reshardLocksSoak: the quick tier's row (a few
// seconds) and the soak's, the trial of a 30 s run with 16 workers
// contending for 64 locks.
var (
	reshardLocksQuick = reshardLoad{locks: 8, clients: 2, workers: 4, dur: 4 * time.Second, ttl: 3 * time.Second}
	reshardLocksSoak  = reshardLoad{locks: 64, clients: 4, workers: 4, dur: 30 * time.Second, ttl: 3 * time.Second}
)

func reshardScenario(name string, load reshardLoad) scenario {
	return scenario{topo: "cluster", name: name, rounds: 1, run: liveReshard(load), params: underLoad,
		assert: reshardAsserts(load), may: []invariant{invS3}, // asserted by reshardAsserts once scripts declare every key
		note: fmt.Sprintf("3 masters; %d workers on %d Clients contend for %d locks and a Counter for %v while every slot of theirs moves to the next master at redis-cli's pace, again and again",
			load.clients*load.workers, load.clients, load.locks, load.dur)}
}

// reshardAsserts: what holds through a reshard. S1 and S2 (with the
// increments lost) are judged with the invariants. Until every script
// declares every key it touches (pendingDeclaredKeys), a script that fails
// mid-way can leave a lock held by nobody until its TTL, and a release
// that ran report the lock lost (which S3 rejects): those figures are
// printed; once the fix is in, they are asserted too.
func reshardAsserts(load reshardLoad) func(t *testing.T, r result) {
	return func(t *testing.T, r result) { checkReshard(t, r, load.ttl) }
}

func checkReshard(t *testing.T, r result, ttl time.Duration) {
	declared := pendingDeclaredKeys(t) == ""
	if !declared {
		t.Logf("live reshard: scripts that fail mid-way, and what they leave, not judged: %s", pendingDeclaredKeys(t))
	}
	if declared && r.Violations[invS3] > 0 {
		t.Errorf("live reshard: %d S3 violations", r.Violations[invS3])
	}
	for _, x := range r.Reshard {
		if declared && (x.MidScript > 0 || x.Lost > 0) {
			t.Errorf("live reshard: %d scripts failed mid-way, %d held locks lost: %s", x.MidScript, x.Lost, strings.Join(x.Samples, " | "))
		}
		if declared && x.Blocked >= int64(ttl) {
			t.Errorf("live reshard: %s had no holder for %s while callers waited, a TTL (%v) or more", x.BlockedKey, dur(x.Blocked), ttl)
		}
		if x.Slots == 0 {
			t.Errorf("live reshard: no slot moved")
		}
		if n := x.CallerOther; n > 0 {
			t.Errorf("live reshard: %d errors other than a script failing mid-way reached a caller with time left: %s",
				n, strings.Join(x.Samples, " | "))
		}
	}
}

// reshardStats counts what the Clients' hooks report.
type reshardStats struct {
	mu                                   sync.Mutex
	callerErrors, callerOther, midScript int
	lost                                 int
	samples                              []string
}

func (s *reshardStats) note(ctx context.Context, err error, caller bool) {
	if caller {
		dl, ok := ctx.Deadline()
		if ok && time.Until(dl) <= 10*time.Millisecond {
			return // the deadline ended it
		}
	}
	mid := midScript(err)
	s.mu.Lock()
	defer s.mu.Unlock()
	if caller {
		s.callerErrors++
		if !mid {
			s.callerOther++
		}
	}
	if mid {
		s.midScript++
	}
	if (caller || mid) && len(s.samples) < 6 {
		txt := errText(err)
		if !slices.Contains(s.samples, txt) {
			s.samples = append(s.samples, txt)
		}
	}
}

// midScript reports whether err is a script's failing mid-way on a key of
// a migrating slot it did not declare: Redis says "non local key", Valkey
// "undeclared keys were accessed during rehashing".
func midScript(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "non local key") || strings.Contains(msg, "undeclared keys were accessed")
}

func (s *reshardStats) hooks() dlock.Hooks {
	return dlock.Hooks{
		Acquire: func(ctx context.Context, i dlock.AcquireInfo) {
			if outcome.Of(i.Err) == outcome.Error {
				s.note(ctx, i.Err, true)
			}
		},
		Release: func(ctx context.Context, i dlock.ReleaseInfo) {
			if i.Err != nil && !errors.Is(i.Err, dlock.ErrLost) {
				s.note(ctx, i.Err, true)
			}
		},
		Renew: func(ctx context.Context, i dlock.RenewInfo) {
			if i.Err != nil && !errors.Is(i.Err, dlock.ErrLost) {
				s.note(ctx, i.Err, false)
			}
		},
		Lost: func(context.Context, dlock.LostInfo) {
			s.mu.Lock()
			s.lost++
			s.mu.Unlock()
		},
	}
}

func liveReshard(load reshardLoad) func(h *harness) {
	return func(h *harness) {
		ctx := h.t.Context()
		cl := redistest.StartCluster(h.t, redistest.ClusterConfig{})
		stats := &reshardStats{}
		var nodes []*node
		for range load.clients {
			o := cl.ClusterOptions()
			o.ContextTimeoutEnabled = true
			nodes = append(nodes, h.topoNode(redis.NewClusterClient(o), dlock.Options{Hooks: stats.hooks()}))
		}
		keys := make([]string, load.locks)
		for i := range keys {
			keys[i] = h.key("l" + strconv.Itoa(i))
		}
		counter := h.key("counter")
		moved := slices.Clone(keys)
		for i := range 4 {
			moved = append(moved, fmt.Sprintf("%s:%d", counter, i)) // the Counter's segment locks
		}
		start := time.Now()
		stop := start.Add(load.dur)
		var incs atomic.Int64
		var wg sync.WaitGroup
		for i := range load.clients * load.workers {
			w := h.worker(nodes[i%len(nodes)], true)
			rng := rand.New(rand.NewPCG(h.seed(), uint64(i)))
			wg.Go(func() {
				for time.Now().Before(stop) && ctx.Err() == nil {
					k := keys[rng.IntN(len(keys))]
					incs.Add(reshardCycle(ctx, w, k, "n:"+k, load.ttl, rng))
				}
			})
		}
		wg.Go(func() { counterSalesOf(h, nodes, stop, counter, 1_000_000) })

		sleep(300 * time.Millisecond) // every lock has been taken
		run, first, last := reshardSlots(h, cl, moved, stop.Add(-300*time.Millisecond))
		wg.Wait()

		for _, k := range keys { // the increments' counts, on the resource's server
			n, err := h.res.Get(ctx, "n:"+k).Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				h.t.Fatalf("reading the increments: %v", err)
			}
			run.Count += n
		}
		run.Increments = incs.Load()
		g := holderGaps(h.hist.Events(), keys, first, last)
		run.LongestGap, run.GapKey, run.Blocked, run.BlockedKey = g.idle, g.idleKey, g.blocked, g.blockedKey
		stats.mu.Lock()
		run.CallerErrors, run.CallerOther, run.MidScript = stats.callerErrors, stats.callerOther, stats.midScript
		run.Lost, run.Samples = stats.lost, stats.samples
		stats.mu.Unlock()
		h.mu.Lock()
		defer h.mu.Unlock()
		h.extra.Reshard = append(h.extra.Reshard, run)
		if d := run.Increments - run.Count; d != 0 {
			h.extra.add(invS2, 1, "%d increments made under locks, the resource counted %d: %d lost updates", run.Increments, run.Count, d)
		}
	}
}

// reshardSlots moves the slot of each of keys in turn to the next master
// at redis-cli's pace, round and round until stop, and records each move.
// It returns the moves' account and when the first began and the last
// ended.
func reshardSlots(h *harness, cl *redistest.Cluster, keys []string, stop time.Time) (run reshardRun, first, last int64) {
	ctx := h.t.Context()
	for i := 0; time.Now().Before(stop) && ctx.Err() == nil; i++ {
		ms, err := cl.MoveSlotsOf(ctx, keys[i%len(keys):i%len(keys)+1], redistest.MoveOptions{})
		if err != nil {
			h.t.Errorf("reshard: %v", err)
			break
		}
		for _, m := range ms {
			if first == 0 {
				first = clock.At(m.Start)
			}
			last = clock.At(m.End)
			run.Slots++
			run.Keys += m.Keys
			h.nem.Span(kindFault, -1, "moved "+m.String(), clock.At(m.Start), last)
		}
	}
	return run, first, last
}

// reshardCycle takes key (Lock, or now and then TryLock), writes the
// fenced resource, increments the plain counter count of key (GET, then SET one
// more while the lock has at least half its TTL left), and releases. It
// returns the increments it made (0 or 1).
func reshardCycle(ctx context.Context, w *worker, key, count string, ttl time.Duration, rng *rand.Rand) int64 {
	wait := rng.IntN(4) > 0
	actx, cancel := context.WithTimeout(ctx, time.Duration(500+rng.IntN(1500))*time.Millisecond)
	lk := w.Acquire(actx, key, ttl, wait)
	cancel()
	if lk == nil {
		return 0
	}
	var n int64
	w.Work(ctx, lk, 1, 0)
	v, err := w.Res.Get(ctx, count).Int64()
	if (err == nil || errors.Is(err, redis.Nil)) && valid(lk) && time.Until(lk.Deadline()) > ttl/2 {
		if w.Res.Set(ctx, count, v+1, 0).Err() == nil {
			n = 1
		}
	}
	sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = w.Release(rctx, lk)
	cancel()
	return n
}

// reshardFigures is the report's account of live-reshard histories.
func reshardFigures(runs []reshardRun) string {
	var x reshardRun
	for _, r := range runs {
		x.Slots, x.Keys = x.Slots+r.Slots, x.Keys+r.Keys
		x.Increments, x.Count = x.Increments+r.Increments, x.Count+r.Count
		x.CallerErrors, x.CallerOther = x.CallerErrors+r.CallerErrors, x.CallerOther+r.CallerOther
		x.MidScript, x.Lost = x.MidScript+r.MidScript, x.Lost+r.Lost
		if r.LongestGap >= x.LongestGap {
			x.LongestGap, x.GapKey = r.LongestGap, r.GapKey
		}
		if r.Blocked >= x.Blocked {
			x.Blocked, x.BlockedKey = r.Blocked, r.BlockedKey
		}
	}
	return fmt.Sprintf("reshard: %d slot moves, %d keys migrated; %d increments, %d lost; %d errors reached a caller with time left (%d other than "+
		"a script failing mid-way); %d scripts failed mid-way (an undeclared key); %d held locks lost; longest span with no holder %s, with no holder while a caller waited %s",
		x.Slots, x.Keys, x.Increments, x.Increments-x.Count, x.CallerErrors, x.CallerOther, x.MidScript, x.Lost, dur(x.LongestGap), dur(x.Blocked))
}
