package faults

import (
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The suite: every scenario builds histories against real redis-server
// processes, with its faults, and checks them (check.go). The quick tier runs
// by default; DLOCK_SOAK=1 (or -soak) adds the seeded random-mix soak.
// DLOCK_SEED fixes the seed. The table of results is printed at the end
// (shown by `go test -v ./faults/`, by `cd faults && go test`, or on
// failure) and written to $DLOCK_FAULTS_REPORT if set.

var (
	soakFlag = flag.Bool("soak", false, "also run the seeded random-mix soak (as DLOCK_SOAK=1)")
	seedFlag = flag.Uint64("seed", 0, "the suite's seed (as DLOCK_SEED; 0: from the clock)")
)

var (
	clock     *timeBase         // the suite's time base
	resSrv    *redistest.Server // the protected resource's server: never faulted
	suiteSeed uint64
	rows      struct {
		sync.Mutex
		list []row
	}
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(childMain(cfg))
	}
	flag.Parse()
	redis.SetLogger(quiet{})
	clock = newTimeBase()
	suiteSeed = *seedFlag
	if v := os.Getenv("DLOCK_SEED"); v != "" && suiteSeed == 0 {
		suiteSeed, _ = strconv.ParseUint(v, 10, 64)
	}
	if suiteSeed == 0 {
		suiteSeed = uint64(time.Now().UnixNano()) % 1_000_000_007
	}
	s, err := redistest.StartMain(redistest.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "the fault suite needs redis-server:", err)
		os.Exit(1)
	}
	resSrv = s
	start := time.Now()
	code := m.Run()
	_ = s.Close()
	if table := renderTable(time.Since(start)); table != "" {
		fmt.Print(table)
		if path := os.Getenv("DLOCK_FAULTS_REPORT"); path != "" {
			_ = os.WriteFile(path, []byte(table), 0o644)
		}
	}
	if code == 0 {
		code = redistest.CheckLeaks("fault suite", 6*time.Second) // a redlock clean-up retries a node for up to 5s
	}
	os.Exit(code)
}

func soakEnabled() bool {
	return *soakFlag || os.Getenv("DLOCK_SOAK") == "1"
}

// scenario is one row of the table.
type scenario struct {
	topo, name string
	rounds     int         // histories in the quick tier
	must       []invariant // a canary: each of these must be violated
	mustAny    bool        // ... or at least one of them (a limit several checks see, timing deciding which)
	may        []invariant // documented side effects of the fault: may be violated
	server     redistest.Config
	params     func(*params)
	run        func(h *harness)
	assert     func(t *testing.T, r result) // extra checks that the fault did what it should
	note       string                       // what the row shows
	load       Load                         // a CPU hog beside the clients (and pauses)
	// pending, if set, says why the defect this scenario finds is not
	// fixed in this build ("" once it is): its violations are then shown
	// but do not fail the suite. Each is a quick probe of the fix.
	pending func(t *testing.T) string
}

type row struct {
	topo, name string
	res        result
	must       []invariant
	seed       uint64
	elapsed    time.Duration
	verdict    string
	note       string
	load       Load
	pending    string
}

func scenarioSeed(sc scenario) uint64 {
	h := fnv.New64a()
	h.Write([]byte(sc.topo + "/" + sc.name))
	return suiteSeed ^ h.Sum64()>>16
}

// harness is the context of one history.
type harness struct {
	t      *testing.T
	sc     *scenario
	round  int
	run    int64 // this history's number in the process (histories)
	rng    *rand.Rand
	hist   *history
	nem    *nemesis
	lock   *redistest.Server
	mon    *monitor
	res    *redis.Client
	params params

	procs atomic.Int64
	rngMu sync.Mutex
	mu    sync.Mutex
	keys  []string
	reads atomic.Uint64
	extra result // what a scenario checked itself (Counter stock), merged into the history's
	// injectors: the command-fault layers of the history's clients.
	injectors []*faultcmd.Injector
}

// seed draws from the history's generator; safe for concurrent use (h.rng
// itself is only for the scenario's own goroutine).
func (h *harness) seed() uint64 {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.Uint64()
}

func (h *harness) nextProc() int { return int(h.procs.Add(1) - 1) }

// histories numbers the histories of this process, so that no two share a
// key: with -count=N, or a scenario run again on the same server, a key
// of an earlier history would still hold that history's resource value,
// and the first read of the new one (which never saw that write) would be
// judged not linearizable.
var histories atomic.Int64

// key names a lock key of this history; its resource is read at the end.
// Keys are unique per history (see histories).
func (h *harness) key(name string) string {
	k := fmt.Sprintf("fk:%s:%s:%d.%d:%s", h.sc.topo, strings.ReplaceAll(h.sc.name, " ", "-"), h.round, h.run, name)
	h.mu.Lock()
	if !slices.Contains(h.keys, k) {
		h.keys = append(h.keys, k)
	}
	h.mu.Unlock()
	return k
}

// client returns a go-redis client for addr, closed at the end of the test.
func (h *harness) client(addr string, retries bool) *redis.Client {
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: 500 * time.Millisecond}
	if !retries {
		o.MaxRetries = -1
	}
	c := redis.NewClient(o)
	h.t.Cleanup(func() { _ = c.Close() })
	return c
}

// node returns a recorded dlock Client over rdb, closed at the end of the
// history (before the checks, so Close's releases are not recorded).
func (h *harness) node(rdb redis.UniversalClient, opts dlock.Options) *node {
	h.t.Helper()
	n, err := newNode(rdb, opts, clock, h.hist)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = n.Close() })
	return n
}

// worker returns a worker on n writing to the resource (fenced or not).
func (h *harness) worker(n *node, fenced bool) *worker {
	return &worker{Proc: h.nextProc(), Node: n, Res: h.res, Fenced: fenced}
}

// sleep sleeps d; the scenarios' timelines are built from it.
func sleep(d time.Duration) { time.Sleep(d) }

// runScenario runs the histories of sc, checks them, and records the row.
func runScenario(t *testing.T, sc scenario, rounds int) result {
	seed := scenarioSeed(sc)
	start := time.Now()
	var total result
	var saved []string
	for round := range rounds {
		r, path := runHistory(t, &sc, round, seed)
		total.Merge(r)
		if path != "" {
			saved = append(saved, path)
		}
	}
	var verdict string
	why := pendingReason(t, sc)
	if why != "" {
		n := strings.Count(why, ";") + 1
		verdict = fmt.Sprintf("pending: %d fix(es) missing", n)
		if len(total.Violations) == 0 {
			verdict = fmt.Sprintf("ok (%d fix(es) missing)", n)
		}
		t.Logf("%s: violations not judged, fixes missing in this build: %s", sc.name, why)
	} else {
		verdict = judge(t, sc, total)
	}
	if sc.assert != nil && !t.Failed() {
		sc.assert(t, total)
	}
	if t.Failed() && verdict == "ok" {
		verdict = "FAIL"
	}
	if len(saved) > 0 {
		t.Logf("histories saved: %s", strings.Join(saved, " "))
	}
	for _, d := range total.Details {
		t.Log(d)
	}
	rows.Lock()
	rows.list = append(rows.list, row{topo: sc.topo, name: sc.name, res: total, must: sc.must, seed: seed,
		elapsed: time.Since(start), verdict: verdict, note: sc.note, load: sc.load, pending: why})
	rows.Unlock()
	return total
}

func runHistory(t *testing.T, sc *scenario, round int, seed uint64) (result, string) {
	t.Helper()
	h := &harness{t: t, sc: sc, round: round, run: histories.Add(1), rng: rand.New(rand.NewPCG(seed, uint64(round))),
		hist: &history{}, params: defaultParams()}
	h.nem = &nemesis{Clock: clock, Rec: h.hist}
	if sc.params != nil {
		sc.params(&h.params)
	}
	h.res = h.client(resSrv.Addr(), true)
	stopLoad, err := startLoad(sc.load)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stopLoad() }()
	stopPauses := func() {}
	if sc.load.Pauses {
		stopPauses = startPauses(h)
	}
	defer func() { stopPauses() }()
	stopStalls := watchStalls(h)
	defer func() { stopStalls() }()
	var lines []monLine
	if sc.topo == "single" {
		// One lock server per history, watched by MONITOR.
		h.lock = redistest.Start(t, sc.server)
		mon, err := startMonitor(h.lock.Addr(), clock)
		if err != nil {
			t.Fatal(err)
		}
		h.mon = mon
		func() {
			defer func() { lines = mon.Stop() }()
			sc.run(h)
		}()
	} else {
		sc.run(h) // builds its own topology; no single server-side view
	}
	stopPauses()
	stopPauses = func() {}
	stopLoad()
	stopLoad = func() {}
	stopStalls()
	stopStalls = func() {}
	cmdCounts := h.logInjected()
	for _, k := range h.keys {
		readResourceSeq(t.Context(), h.res, k, clock, h.hist, -2, &h.reads)
	}
	events := h.hist.Events()
	r := check(events, lines, h.params)
	h.mu.Lock()
	h.extra.Histories = 0
	h.extra.CmdFaults = cmdCounts
	r.Merge(h.extra)
	h.mu.Unlock()
	if unexpected(*sc, r) || os.Getenv("DLOCK_FAULTS_SAVE") != "" {
		return r, save(sc, round, events, r)
	}
	return r, ""
}

func unexpected(sc scenario, r result) bool {
	for inv, n := range r.Violations {
		if n > 0 && !slices.Contains(sc.must, inv) && !slices.Contains(sc.may, inv) {
			return true
		}
	}
	return false
}

// save writes a history (and porcupine's visualization if S3 rejected it)
// for a post-mortem, and returns the path.
func save(sc *scenario, round int, events []event, r result) string {
	dir := os.Getenv("DLOCK_FAULTS_OUT")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "dlock-faults")
	}
	_ = os.MkdirAll(dir, 0o755)
	base := filepath.Join(dir, fmt.Sprintf("%s-%s-%d-seed%d", sc.topo, strings.ReplaceAll(sc.name, " ", "_"), round, suiteSeed))
	_ = saveJSON(base+".json", events)
	if r.Illegal != nil {
		_ = porcupine.VisualizePath(model(), *r.Illegal, base+".html")
	}
	return base + ".json"
}

func pendingReason(t *testing.T, sc scenario) string {
	if sc.pending == nil || os.Getenv("DLOCK_FAULTS_STRICT") == "1" {
		return ""
	}
	return sc.pending(t)
}

// judge compares the violations with the scenario's expectations.
func judge(t *testing.T, sc scenario, r result) string {
	t.Helper()
	verdict := "ok"
	seen := 0
	for _, inv := range sc.must {
		if r.Violations[inv] > 0 {
			seen++
		}
	}
	for _, inv := range sc.must {
		if r.Violations[inv] == 0 && !(sc.mustAny && seen > 0) {
			t.Errorf("canary %s/%s no longer detects %s: the harness or the checker is broken", sc.topo, sc.name, inv)
			verdict = "FAIL: canary silent"
		}
	}
	if len(sc.must) > 0 && verdict == "ok" {
		verdict = "canary ok"
	}
	for _, inv := range invariants {
		if n := r.Violations[inv]; n > 0 && !slices.Contains(sc.must, inv) && !slices.Contains(sc.may, inv) {
			t.Errorf("%s/%s: %d unexpected %s violations", sc.topo, sc.name, n, inv)
			verdict = "FAIL"
		}
	}
	if msg := unparsedProblem(r, os.Getenv("DLOCK_FAULTS_STRICT") == "1"); msg != "" {
		t.Errorf("%s/%s: %s", sc.topo, sc.name, msg)
		verdict = "FAIL: unparsed MONITOR lines"
	}
	return verdict
}

// unparsedProblem is the complaint, in strict mode, about MONITOR lines
// the replay could not read: R1, L3 and L4 did not see those commands.
// Otherwise the report only counts them.
func unparsedProblem(r result, strict bool) string {
	if !strict || r.Unparsed == 0 {
		return ""
	}
	return fmt.Sprintf("%d MONITOR lines could not be parsed: R1, L3 and L4 missed those commands", r.Unparsed)
}

func renderTable(total time.Duration) string {
	rows.Lock()
	defer rows.Unlock()
	if len(rows.list) == 0 {
		return ""
	}
	var b strings.Builder
	tier := "quick tier"
	if soakEnabled() {
		tier = "quick tier + soak"
	}
	race := ""
	if raceEnabled {
		race = ", -race"
	}
	fmt.Fprintf(&b, "\ndlock fault-injection suite: %s, seed %d (DLOCK_SEED), %s, %s%s, %d CPUs, %v\n",
		tier, suiteSeed, redisVersion(), runtime.Version(), race, runtime.NumCPU(), total.Round(time.Second))
	fmt.Fprintf(&b, "%-9s %-34s %-16s %4s %-16s", "topology", "scenario", "load", "hist", "ops ok/fail/unk")
	for _, inv := range invariants {
		fmt.Fprintf(&b, " %4s", inv)
	}
	fmt.Fprintf(&b, "  %-17s %6s  %s\n", "hand-over p50/p99", "time", "verdict")
	for _, r := range rows.list {
		fmt.Fprintf(&b, "%-9s %-34s %-16s %4d %-16s", r.topo, r.name, r.load, r.res.Histories,
			fmt.Sprintf("%d/%d/%d", r.res.OK, r.res.Fail, r.res.Unknown))
		for _, inv := range invariants {
			n := r.res.Violations[inv]
			cell := strconv.Itoa(n)
			switch {
			case slices.Contains(r.must, inv):
				cell += "!"
			case inv == invL2 && len(r.res.CrashHandovers) == 0 && n == 0:
				cell = "-"
			case inv == invL3 && r.res.Commands == 0 && n == 0:
				cell = "-"
			case (inv == invR1 || inv == invL4) && r.res.Monitored == 0:
				cell = "-"
			}
			fmt.Fprintf(&b, " %4s", cell)
		}
		ho := append(append([]int64(nil), r.res.Handovers...), r.res.CrashHandovers...)
		hand := "-"
		if len(ho) > 0 {
			hand = fmt.Sprintf("%s/%s", dur(percentile(ho, 0.5)), dur(percentile(ho, 0.99)))
		}
		fmt.Fprintf(&b, "  %-17s %6s  %s\n", hand, r.elapsed.Round(100*time.Millisecond), r.verdict)
	}
	b.WriteString("n! = violations a canary must show (a documented limit, detected); - = not exercised.\n")
	b.WriteString("load: CPU hog beside the clients, busy processes (p) + goroutines (g) at a duty cycle;\n")
	b.WriteString("  pauses = scheduler pauses injected at the engine's pause points.\n")
	b.WriteString("seed per row: DLOCK_SEED reproduces the suite; figures:\n")
	for _, r := range rows.list {
		fmt.Fprintf(&b, "  %-9s %-34s seed %-20d %s\n", r.topo, r.name, r.seed, figures(r.res))
		if r.pending != "" {
			fmt.Fprintf(&b, "  %-9s %-34s fixes missing: %s\n", "", "", r.pending)
		}
	}
	return b.String()
}

func figures(r result) string {
	var f []string
	if r.S1MaxOverlap > 0 {
		f = append(f, "max overlap "+dur(r.S1MaxOverlap))
	}
	if r.StaleAttempted+r.StaleRefused+r.StaleAccepted > 0 {
		f = append(f, fmt.Sprintf("stale writes attempted %d, refused %d, accepted %d", r.StaleAttempted, r.StaleRefused, r.StaleAccepted))
	}
	if r.DupFences+r.Regressions > 0 {
		f = append(f, fmt.Sprintf("fences repeated %d, regressed %d", r.DupFences, r.Regressions))
	}
	if r.S3Unk > 0 {
		f = append(f, fmt.Sprintf("S3 undecided %d", r.S3Unk))
	}
	if r.R2MaxLag != 0 || r.R2Exempt > 0 {
		f = append(f, fmt.Sprintf("loss signal max %s after deadline (%d while stopped, %d while the process was starved)",
			dur(r.R2MaxLag), r.R2Exempt, r.R2Stalled))
	}
	if r.L1Stalled > 0 {
		f = append(f, fmt.Sprintf("%d Lock calls late while the process was starved", r.L1Stalled))
	}
	if r.L1MaxOver > 0 {
		f = append(f, "Lock max "+dur(r.L1MaxOver)+" past ctx deadline")
	}
	if r.R2Worst.What != "" {
		f = append(f, "latest loss signal: "+r.R2Worst.What)
	}
	if r.L1Worst.What != "" {
		f = append(f, "latest Lock: "+r.L1Worst.What)
	}
	if len(r.CrashHandovers) > 0 {
		f = append(f, fmt.Sprintf("crash hand-over max %s", dur(slices.Max(r.CrashHandovers))))
	}
	if r.Commands > 0 && r.Handoffs > 0 {
		f = append(f, fmt.Sprintf("%.2f commands per hand-off (%d hand-offs)", float64(r.Commands)/float64(r.Handoffs), r.Handoffs))
	}
	if len(r.Orphans) > 0 {
		f = append(f, fmt.Sprintf("orphans %d, longest %s", len(r.Orphans), dur(slices.Max(r.Orphans))))
	}
	if r.Unparsed > 0 {
		f = append(f, fmt.Sprintf("MONITOR lines unparsed %d (key states unknown after each)", r.Unparsed))
	}
	if len(r.CmdFaults) > 0 {
		var parts []string
		for _, a := range []string{"drop-reply", "fail-before", "delay", "hold"} {
			if n := r.CmdFaults[a]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", a, n))
			}
		}
		f = append(f, "command faults: "+strings.Join(parts, ", "))
	}
	if r.Pauses > 0 {
		f = append(f, fmt.Sprintf("scheduler pauses %d", r.Pauses))
	}
	if r.Refused > 0 {
		f = append(f, fmt.Sprintf("refused as invalid arguments %d", r.Refused))
	}
	if len(r.Counter) > 0 {
		var c counterRun
		for _, x := range r.Counter {
			c.Stock, c.Sold, c.Left, c.Errors = c.Stock+x.Stock, c.Sold+x.Sold, c.Left+x.Left, c.Errors+x.Errors
		}
		f = append(f, fmt.Sprintf("counter stock %d: sold %d, left %d, missing %d, Take errors %d",
			c.Stock, c.Sold, c.Left, c.Stock-c.Sold-c.Left, c.Errors))
	}
	if len(r.Reshard) > 0 {
		f = append(f, reshardFigures(r.Reshard))
	}
	if len(f) == 0 {
		return "-"
	}
	return strings.Join(f, "; ")
}

// redisVersion names the server program the suite ran and its version,
// e.g. "redis-server 7.0.15" or "valkey-server 8.0.1".
func redisVersion() string {
	bin := redistest.ServerBinary()
	name := filepath.Base(bin)
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return name + " ?"
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return name + " " + v
		}
	}
	return strings.TrimSpace(string(out))
}
