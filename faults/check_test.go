package faults

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The checker is tested on hand-made histories first: every invariant must
// pass a good history and catch a bad one. (The canary scenarios then show
// the same on real runs.)

const ms = int64(time.Millisecond)

// hb builds histories: each op is an invoke and a completion.
type hb struct {
	ev  []event
	ids uint64
}

func (h *hb) op(e event, call, ret int64, typ eventType) {
	h.ids++
	in := e
	in.Type, in.ID, in.T, in.Deadline = evInvoke, h.ids, call, 0
	out := e
	out.Type, out.ID, out.T = typ, h.ids, ret
	h.ev = append(h.ev, in, out)
}

// grant: proc acquires key with fence at [call, ret], TTL ttl, request sent at call.
func (h *hb) grant(proc int, key, owner string, fence uint64, call, ret, ttl int64) {
	drift := ttl/100 + 2*ms
	h.op(event{Proc: proc, Kind: kindLock, Key: key, Fence: fence, Owner: owner, Sent: call, TTL: ttl, Drift: drift,
		Deadline: call + ttl - drift}, call, ret, evOK)
}

func (h *hb) unlock(proc int, key, owner string, call, ret int64, typ eventType) {
	h.op(event{Proc: proc, Kind: kindUnlock, Key: key, Owner: owner}, call, ret, typ)
}

func (h *hb) write(proc int, key, owner string, fence uint64, call, ret int64, typ eventType) {
	h.op(event{Proc: proc, Kind: kindWrite, Key: key, Owner: owner, Fence: fence}, call, ret, typ)
}

func (h *hb) check(t *testing.T, p params) result {
	t.Helper()
	return check(h.ev, nil, p)
}

func expectOnly(t *testing.T, r result, want ...invariant) {
	t.Helper()
	for _, inv := range invariants {
		got := r.Violations[inv] > 0
		exp := false
		for _, w := range want {
			exp = exp || w == inv
		}
		if got != exp {
			t.Errorf("%s violated = %v, want %v (details: %s)", inv, got, exp, strings.Join(r.Details, "; "))
		}
	}
}

func TestCheckGoodHistory(t *testing.T) {
	var h hb
	ttl := 1000 * ms
	h.grant(0, "k", "A", 5, 0, 10*ms, ttl)
	h.write(0, "k", "A", 5, 20*ms, 25*ms, evOK)
	h.unlock(0, "k", "A", 100*ms, 105*ms, evOK)
	h.grant(1, "k", "B", 6, 50*ms, 110*ms, ttl) // waited, got it after A's unlock
	h.write(1, "k", "B", 6, 120*ms, 125*ms, evOK)
	h.write(0, "k", "A", 5, 130*ms, 135*ms, evFail) // stale, refused
	h.unlock(1, "k", "B", 200*ms, 205*ms, evOK)
	// A grant after B's lease could have lapsed, B never having unlocked, is fine too.
	h.grant(2, "k2", "C", 1, 0, 5*ms, 100*ms)
	h.grant(3, "k2", "D", 2, 90*ms, 120*ms, 100*ms)
	r := h.check(t, defaultParams())
	expectOnly(t, r)
	if len(r.Handovers) != 1 || r.Handovers[0] != 10*ms {
		t.Errorf("hand-overs %v, want [10ms]", r.Handovers)
	}
	if r.StaleRefused != 1 || r.StaleAttempted != 1 {
		t.Errorf("stale refused %d attempted %d", r.StaleRefused, r.StaleAttempted)
	}
}

func TestCheckOverlap(t *testing.T) {
	var h hb
	h.grant(0, "k", "A", 5, 0, 10*ms, 1000*ms)
	h.grant(1, "k", "B", 6, 20*ms, 30*ms, 1000*ms) // A never released, lease far from over
	r := h.check(t, defaultParams())
	expectOnly(t, r, invS1, invS3)
}

func TestCheckFenceRules(t *testing.T) {
	var h hb
	h.grant(0, "k", "A", 5, 0, 10*ms, 100*ms)
	h.unlock(0, "k", "A", 20*ms, 25*ms, evOK)
	h.grant(1, "k", "B", 5, 30*ms, 40*ms, 100*ms) // the same fence again
	h.unlock(1, "k", "B", 50*ms, 55*ms, evOK)
	h.grant(2, "k", "C", 4, 60*ms, 70*ms, 100*ms) // and a smaller one
	r := h.check(t, defaultParams())
	expectOnly(t, r, invS2, invS3)
	if r.DupFences != 1 || r.Regressions != 2 {
		t.Errorf("dup %d regressions %d", r.DupFences, r.Regressions)
	}
}

func TestCheckStaleWriteAccepted(t *testing.T) {
	var h hb
	h.grant(0, "k", "A", 5, 0, 10*ms, 100*ms)
	h.grant(1, "k", "B", 6, 90*ms, 120*ms, 100*ms)
	h.write(1, "k", "B", 6, 130*ms, 135*ms, evOK)
	h.write(0, "k", "A", 5, 140*ms, 145*ms, evOK) // the unfenced resource took it
	p := defaultParams()
	r := h.check(t, p)
	expectOnly(t, r, invS2, invS3)
	p.FencedResource = false // a plain resource is not held to the register model
	r = h.check(t, p)
	expectOnly(t, r, invS2)
	if r.StaleAccepted != 1 {
		t.Errorf("stale accepted %d", r.StaleAccepted)
	}

	// A delayed write that lands later shows in a read.
	var d hb
	d.grant(0, "k", "A", 5, 0, 10*ms, 100*ms)
	d.write(0, "k", "A", 5, 20*ms, 0, evInfo) // sent, reply never came
	d.grant(1, "k", "B", 6, 90*ms, 120*ms, 100*ms)
	d.write(1, "k", "B", 6, 130*ms, 135*ms, evOK)
	d.op(event{Proc: 9, Kind: kindRead, Key: "k", Fence: 5, Owner: "A"}, 300*ms, 301*ms, evOK)
	r = d.check(t, p)
	expectOnly(t, r, invS2)
}

func TestCheckReleaseOfAnotherOwner(t *testing.T) {
	var h hb
	h.grant(0, "k", "A", 5, 0, 10*ms, 50*ms)
	h.grant(1, "k", "B", 6, 60*ms, 70*ms, 1000*ms) // A's lease lapsed: fine
	h.unlock(0, "k", "A", 80*ms, 85*ms, evOK)      // but A's release "succeeded"
	r := h.check(t, defaultParams())
	expectOnly(t, r, invS3)
}

func TestCheckR2AndL1(t *testing.T) {
	var h hb
	h.grant(0, "k", "A", 5, 0, 10*ms, 100*ms)
	h.ev = append(h.ev, event{Type: evOK, ID: 100, Proc: 0, T: 400 * ms, Kind: kindLost, Key: "k", Owner: "A", Deadline: 97 * ms})
	h.ids++
	h.ev = append(h.ev,
		event{Type: evInvoke, ID: 101, Proc: 1, T: 0, Kind: kindLock, Key: "k", Deadline: 100 * ms},
		event{Type: evFail, ID: 101, Proc: 1, T: 900 * ms, Kind: kindLock, Key: "k"})
	r := h.check(t, defaultParams())
	expectOnly(t, r, invR2, invL1)

	// A holder stopped by the nemesis is exempt from R2.
	h.ev = append(h.ev, event{Type: evOK, ID: 102, Proc: 0, T: 350 * ms, Call: 50 * ms, Kind: kindPause})
	r = h.check(t, defaultParams())
	expectOnly(t, r, invL1)
	if r.R2Exempt != 1 {
		t.Errorf("exempt %d", r.R2Exempt)
	}
}

func TestCheckCrashHandover(t *testing.T) {
	var h hb
	h.grant(0, "k", "A", 5, 0, 10*ms, 100*ms)
	h.ev = append(h.ev, event{Type: evOK, ID: 100, Proc: 0, T: 50 * ms, Call: 50 * ms, Kind: kindCrash})
	h.grant(1, "k", "B", 6, 20*ms, 170*ms, 100*ms)
	p := defaultParams()
	p.L2Bound = 200 * time.Millisecond
	r := h.check(t, p)
	expectOnly(t, r)
	if len(r.CrashHandovers) != 1 || r.CrashHandovers[0] != 120*ms {
		t.Errorf("crash hand-overs %v", r.CrashHandovers)
	}
	p.L2Bound = 100 * time.Millisecond
	expectOnly(t, h.check(t, p), invL2)
}

func TestMonitorParse(t *testing.T) {
	c := &timeBase{zero: 1_000_000_000}
	l, ok := parseMonitorLine(`+2.000500 [0 127.0.0.1:5] "evalsha" "abc" "1" "k\"x" "v 1\\n\x01\xc3\xa9"`, c)
	if !ok || l.Lua || l.T != 1_000_500_000 || len(l.Args) != 5 || l.Args[3] != `k"x` || l.Args[4] != "v 1\\n\x01é" {
		t.Fatalf("%+v %v", l, ok)
	}
	l, ok = parseMonitorLine(`+2.000600 [0 lua] "DEL" "k"`, c)
	if !ok || !l.Lua || l.Args[0] != "DEL" {
		t.Fatalf("%+v %v", l, ok)
	}
}

// TestAnalyzeMonitorLegacyOrphan: a legacy lock's value is its expiry
// stamp, with no Redis expiry: an orphaned stamp (its taker's reply lost)
// lasts until the stamp, not until the next write to the key.
func TestAnalyzeMonitorLegacyOrphan(t *testing.T) {
	const zero = int64(1_796_000_000_000) * int64(time.Millisecond) // the base's zero, Unix ns
	line := func(t int64, lua bool, args ...string) monLine {
		return monLine{T: t, Unix: zero + t, Lua: lua, Args: args}
	}
	stamp := strconv.FormatInt((zero+500*ms)/int64(time.Millisecond), 10) // valid until 500ms
	keys := map[string]bool{"k": true}
	lines := []monLine{
		line(100*ms, false, "evalsha", "s", "1", "k", stamp),
		line(100*ms, true, "SET", "k", stamp), // the taker never hears of it
		line(5000*ms, false, "ping"),
	}
	st := analyzeMonitor(lines, keys, map[string]bool{}, 0, never)
	if len(st.Orphans) != 1 || st.Orphans[0].Dur != 400*ms {
		t.Fatalf("orphans %+v, want one of 400ms", st.Orphans)
	}
}

func TestAnalyzeMonitor(t *testing.T) {
	line := func(t int64, lua bool, args ...string) monLine { return monLine{T: t, Lua: lua, Args: args} }
	keys := map[string]bool{"k": true}
	lines := []monLine{
		line(0, false, "evalsha", "s", "3", "k", "f", "q", "A", "100"),
		line(0, true, "SET", "k", "A", "PX", "100"),
		line(10*ms, false, "evalsha", "s", "2", "k", "f", "A", "100"),
		line(10*ms, true, "PEXPIRE", "k", "100"), // A extends its own: fine
		line(50*ms, false, "evalsha", "s", "2", "k", "q", "B", "w", "1000", "0"),
		line(50*ms, true, "DEL", "k"), // B deletes A's live lock: R1
		line(60*ms, false, "evalsha", "s", "3", "k", "f", "q", "C", "100"),
		line(60*ms, true, "SET", "k", "C", "PX", "100"), // free now: fine; C is never granted
		line(400*ms, false, "evalsha", "s", "3", "k", "f", "q", "D", "100"),
		line(400*ms, true, "SET", "k", "D", "PX", "100"), // C expired long ago: fine
	}
	st := analyzeMonitor(lines, keys, map[string]bool{"A": true, "D": true}, 0, never)
	if st.Foreign != 1 || st.Commands != 5 {
		t.Fatalf("%+v", st)
	}
	if len(st.Orphans) != 1 || st.Orphans[0].Token != "C" || st.Orphans[0].Dur != 100*ms {
		t.Fatalf("orphans %+v", st.Orphans)
	}
	// After a gap (restart) nothing is known until the next SET.
	lines = append(lines, monLine{T: 410 * ms, Gap: true, Args: []string{"ping"}},
		line(420*ms, false, "evalsha", "s", "2", "k", "q", "B", "w", "1000", "0"),
		line(420*ms, true, "DEL", "k"))
	st = analyzeMonitor(lines, keys, map[string]bool{"A": true, "D": true}, 0, never)
	if st.Foreign != 1 || st.Gaps != 1 {
		t.Fatalf("%+v", st)
	}
}

// An FCALL's line starts a script as an EVALSHA's does (dlock runs its
// scripts as functions where the server has them).
func TestAnalyzeMonitorFcall(t *testing.T) {
	line := func(t int64, lua bool, args ...string) monLine { return monLine{T: t, Lua: lua, Args: args} }
	lines := []monLine{
		line(0, false, "fcall", "f_acquire", "3", "k", "f", "q", "A", "100"),
		line(0, true, "SET", "k", "A", "PX", "100"),
		line(50*ms, false, "fcall", "f_release", "2", "k", "q", "B", "w", "1000", "0"),
		line(50*ms, true, "DEL", "k"), // B deletes A's live lock: R1
		line(60*ms, false, "fcall", "f_acquire", "3", "k", "f", "q", "C", "100"),
		line(60*ms, true, "SET", "k", "C", "PX", "100"), // free now: fine; C is never granted
	}
	st := analyzeMonitor(lines, map[string]bool{"k": true}, map[string]bool{"A": true}, 0, never)
	if st.Foreign != 1 || st.Commands != 3 || len(st.Orphans) != 1 || st.Orphans[0].Token != "C" {
		t.Fatalf("%+v", st)
	}
}

// A MONITOR line that does not parse is kept and counted, and the keys are
// unknown after it: dropping it would have the replay judge B's acquire
// against a lock the unreadable command (a DEL, here) had removed.
func TestMonitorUnparsedLines(t *testing.T) {
	m := &monitor{clock: &timeBase{zero: 1_000_000_000}, seen: map[string]chan struct{}{}}
	for _, raw := range []string{
		`+1.000000 [0 127.0.0.1:5] "evalsha" "s" "3" "k" "f" "q" "A" "100"`,
		`+1.000000 [0 lua] "SET" "k" "A" "PX" "100"`,
		`+1.010000 [0 127.0.0.1:5] DEL k`, // unquoted: not MONITOR's format
		`+1.020000 [0 127.0.0.1:5] "evalsha" "s" "3" "k" "f" "q" "B" "100"`,
		`+1.020000 [0 lua] "SET" "k" "B" "PX" "100"`,
	} {
		m.take(raw, false)
	}
	lines := m.lines
	if len(lines) != 5 || lines[2].Unparsed == "" || len(lines[2].Args) != 0 || lines[2].T != lines[1].T {
		t.Fatalf("lines %+v", lines)
	}
	keys, owned := map[string]bool{"k": true}, map[string]bool{"A": true, "B": true}
	st := analyzeMonitor(lines, keys, owned, 0, never)
	if st.Unparsed != 1 || st.Foreign != 0 || st.Commands != 2 {
		t.Fatalf("%+v", st)
	}
	if len(st.Details) != 1 || !strings.Contains(st.Details[0], "could not be parsed") {
		t.Fatalf("details %q", st.Details)
	}
	// What the replay would have concluded without the line.
	without := append(append([]monLine(nil), lines[:2]...), lines[3:]...)
	if st := analyzeMonitor(without, keys, owned, 0, never); st.Foreign != 1 {
		t.Fatalf("without the line: %+v", st)
	}
	r := check(nil, lines, defaultParams())
	if r.Unparsed != 1 || r.Monitored != 1 {
		t.Fatalf("result %+v", r)
	}
	var sum result
	sum.Merge(r)
	sum.Merge(r)
	if sum.Unparsed != 2 {
		t.Fatalf("merged %d", sum.Unparsed)
	}
	if unparsedProblem(r, false) != "" || !strings.Contains(unparsedProblem(r, true), "1 MONITOR lines") {
		t.Fatalf("strict %q, lenient %q", unparsedProblem(r, true), unparsedProblem(r, false))
	}
	if unparsedProblem(check(nil, lines[:2], defaultParams()), true) != "" {
		t.Fatal("strict mode complains about a clean view")
	}
	if f := figures(r); !strings.Contains(f, "MONITOR lines unparsed 1") {
		t.Fatalf("figures %q", f)
	}
}

// A top-level command (no script, no token) that writes a lock key while
// it holds a live token is a foreign write; one that writes nothing, or a
// key whose validity is in its value (no Redis expiry), is not.
func TestAnalyzeMonitorTopLevelWrites(t *testing.T) {
	line := func(t int64, lua bool, args ...string) monLine {
		l := monLine{T: t, Lua: lua, Args: args, Addr: "127.0.0.1:7"}
		if lua {
			l.Addr = "lua"
		}
		return l
	}
	acquire := func(t int64, key, token, px string) []monLine {
		set := line(t, true, "SET", key, token, "PX", px)
		if px == "" {
			set = line(t, true, "SET", key, token)
		}
		return []monLine{line(t, false, "evalsha", "s", "3", key, "f", "q", token, px), set}
	}
	var lines []monLine
	lines = append(lines, acquire(0, "k", "A", "100")...)
	lines = append(lines, acquire(0, "legacy", "1000", "")...)
	lines = append(lines,
		line(10*ms, false, "SET", "k", "X", "NX"),      // writes nothing: fine
		line(20*ms, false, "DEL", "k"),                 // A's live lock deleted: R1
		line(25*ms, false, "GETSET", "legacy", "2000"), // no expiry: the legacy takeover, not judged
		line(26*ms, false, "SETNX", "legacy", "3000"),  // writes nothing
	)
	lines = append(lines, acquire(30*ms, "k", "B", "100")...) // k was free: fine
	lines = append(lines,
		line(60*ms, false, "PEXPIRE", "k", "1"),          // B's live lock shortened: R1
		line(90*ms, false, "SET", "k", "Y", "PX", "100"), // expired at 61ms: free
		line(500*ms, false, "DEL", "k"),                  // Y expired long ago: fine
	)
	keys := map[string]bool{"k": true, "legacy": true}
	st := analyzeMonitor(lines, keys, map[string]bool{"A": true, "B": true, "1000": true}, 0, never)
	if st.Foreign != 2 {
		t.Fatalf("foreign %d, want 2: %s", st.Foreign, strings.Join(st.Details, "\n"))
	}
	if !strings.Contains(st.Details[0], "top-level DEL k by client 127.0.0.1:7") ||
		!strings.Contains(st.Details[1], "top-level PEXPIRE k") {
		t.Fatalf("details:\n%s", strings.Join(st.Details, "\n"))
	}
}

// A bulk renewal (extend_many) extends many locks in one script call, each
// for its own token: not a foreign write; one for the wrong token is.
func TestAnalyzeMonitorBulk(t *testing.T) {
	probe.NameScript("extend_many", "bulk-test-sha")
	line := func(t int64, lua bool, args ...string) monLine { return monLine{T: t, Lua: lua, Args: args} }
	keys := map[string]bool{"k": true, "k2": true}
	lines := []monLine{
		line(0, false, "evalsha", "s", "3", "k", "f", "q", "A", "100"),
		line(0, true, "SET", "k", "A", "PX", "100"),
		line(0, false, "evalsha", "s", "3", "k2", "f2", "q2", "B", "100"),
		line(0, true, "SET", "k2", "B", "PX", "100"),
		line(10*ms, false, "evalsha", "bulk-test-sha", "2", "k", "k2", "100", "0", "A", "B"),
		line(10*ms, true, "PEXPIRE", "k", "100"),
		line(10*ms, true, "PEXPIRE", "k2", "100"),
		line(20*ms, false, "evalsha", "bulk-test-sha", "4", "k", "k2", "f", "f2", "100", "10100", "A", "X"),
		line(20*ms, true, "PEXPIRE", "k", "100"),
		line(20*ms, true, "PEXPIRE", "k2", "100"), // X extends B's lock: R1
	}
	st := analyzeMonitor(lines, keys, map[string]bool{"A": true, "B": true}, 0, never)
	if st.Foreign != 1 {
		t.Fatalf("%+v", st)
	}
}

// An Unlock that reports the lock lost between the holder's deadline and
// the key's earliest expiry on the server is legal (S3): the library
// reports a loss at the deadline, which the drift allowance puts before
// the server's expiry. The Unlock carries the holder's drift.
func TestUnlockLostAfterDeadline(t *testing.T) {
	var h hb
	h.grant(0, "k", "a", 1, 0, 10*ms, 400*ms) // drift 6ms: deadline 394ms
	h.op(event{Proc: 0, Kind: kindUnlock, Key: "k", Owner: "a", Drift: 6 * ms}, 200*ms, 395*ms, evFail)
	expectOnly(t, h.check(t, defaultParams()))
	// Before the deadline it cannot have lapsed.
	var h2 hb
	h2.grant(0, "k", "a", 1, 0, 10*ms, 400*ms)
	h2.op(event{Proc: 0, Kind: kindUnlock, Key: "k", Owner: "a", Drift: 6 * ms}, 200*ms, 380*ms, evFail)
	expectOnly(t, h2.check(t, defaultParams()), invS3)
}

// A script's clock snapshot is taken after its EVALSHA's MONITOR line and
// before its first command's: a server stalled in between runs the script
// later than its line says, and a key that expired meanwhile is free to it
// (no foreign write). A foreign write in a script that ran at once is
// still one, and its detail quotes the key's latest commands with their
// own times.
func TestAnalyzeMonitorScriptClock(t *testing.T) {
	line := func(t int64, lua bool, args ...string) monLine { return monLine{T: t, Lua: lua, Args: args} }
	keys := map[string]bool{"k": true}
	lines := []monLine{
		line(0, false, "evalsha", "s", "3", "k", "f", "q", "A", "100"),
		line(0, true, "GET", "k"),
		line(0, true, "SET", "k", "A", "PX", "100"),
		// B's EVALSHA line at 50ms; the server ran nothing more until
		// 200ms, so the script's snapshot is past A's expiry.
		line(50*ms, false, "evalsha", "s", "3", "k", "f", "q", "B", "100"),
		line(200*ms, true, "GET", "k"),
		line(200*ms, true, "SET", "k", "B", "PX", "1000"),
		// C's script runs at once, while B's lock is live (its PX based
		// at 50ms at the earliest, on a server that bases it on the
		// script's snapshot): R1.
		line(210*ms, false, "evalsha", "s", "3", "k", "f", "q", "C", "100"),
		line(210*ms+50_000, true, "GET", "k"),
		line(210*ms+60_000, true, "SET", "k", "C", "PX", "100"),
	}
	st := analyzeMonitor(lines, keys, map[string]bool{"A": true, "B": true}, 0, never)
	if st.Foreign != 1 || len(st.Details) != 1 {
		t.Fatalf("%+v", st)
	}
	d := st.Details[0]
	for _, want := range []string{"token C ", "held B", "latest commands on it", "50.0ms", "200.0ms   lua SET k B PX 1000",
		"210.1ms   lua SET k C PX 100 (script of 210.0ms)"} {
		if !strings.Contains(d, want) {
			t.Errorf("detail lacks %q:\n%s", want, d)
		}
	}

	// A SET run late in its script expires up to that late: a PEXPIRE in
	// between cannot tell whether the key was still there.
	lines = []monLine{
		line(0, false, "evalsha", "s", "3", "k", "f", "q", "A", "100"),
		line(150*ms, true, "SET", "k", "A", "PX", "100"), // expires in [100ms, 250ms]
		line(200*ms, false, "evalsha", "s", "2", "k", "f", "A", "100"),
		line(200*ms, true, "PEXPIRE", "k", "100"),
		line(220*ms, false, "evalsha", "s", "2", "k", "q", "D", "w", "1000", "0"),
		line(220*ms, true, "DEL", "k"), // unknown, not judged
	}
	if st := analyzeMonitor(lines, keys, map[string]bool{"A": true}, 0, never); st.Foreign != 0 {
		t.Fatalf("%+v", st)
	}

	// After a gap a key seen for the first time is unknown too: a SET NX
	// may or may not have written it.
	keys["k2"] = true
	lines = []monLine{
		{T: 0, Gap: true, Args: []string{"ping"}},
		line(10*ms, false, "evalsha", "s", "3", "k2", "f", "q", "Y", "100"),
		line(10*ms, true, "SET", "k2", "Y", "PX", "100", "NX"),
		line(20*ms, false, "evalsha", "s", "3", "k2", "f", "q", "Z", "100"),
		line(20*ms, true, "SET", "k2", "Z", "PX", "100"),
	}
	if st := analyzeMonitor(lines, keys, map[string]bool{}, 0, never); st.Foreign != 0 {
		t.Fatalf("%+v", st)
	}
}

// The report's account of the latest loss signal and the latest Lock names
// the operation and the faults overlapping its late part (those of the key
// and of the whole process, not another key's).
func TestWorstAccounts(t *testing.T) {
	var h hb
	h.grant(0, "k", "a", 1, 0, 10*ms, 400*ms)
	dl := 400*ms - 6*ms
	h.ev = append(h.ev, event{Type: evOK, ID: 100, Proc: 0, T: dl + 80*ms, Kind: kindLost, Key: "k", Owner: "a", Deadline: dl,
		Err: "lost: expired"})
	h.ev = append(h.ev, event{Type: evInvoke, ID: 101, Proc: 1, T: 100 * ms, Kind: kindLock, Key: "k", Deadline: 500 * ms},
		event{Type: evInfo, ID: 101, Proc: 1, T: 700 * ms, Kind: kindLock, Key: "k", Err: "context done"})
	nem := &nemesis{Rec: recorderFunc(func(e event) { h.ev = append(h.ev, e) })}
	nem.Span(kindPause, stallProc, "test process not scheduled", dl+10*ms, dl+70*ms)
	nem.KeySpan("k", "pause before-confirm", 450*ms, 690*ms)
	nem.KeySpan("other", "pause after-grant", 500*ms, 690*ms)
	r := h.check(t, defaultParams())
	if r.R2Worst.By != 80*ms || !strings.Contains(r.R2Worst.What, "loss signal of exclusive k") ||
		!strings.Contains(r.R2Worst.What, "process not scheduled (60.0ms)") ||
		!strings.Contains(r.R2Worst.What, "not scheduled for 60.0ms of it") {
		t.Errorf("R2Worst = %+v", r.R2Worst)
	}
	if r.L1Worst.By != 200*ms || !strings.Contains(r.L1Worst.What, "pause before-confirm (190.0ms)") ||
		strings.Contains(r.L1Worst.What, "after-grant") {
		t.Errorf("L1Worst = %+v", r.L1Worst)
	}
}

type recorderFunc func(event)

func (f recorderFunc) Record(e event) { f(e) }

// On a real server: MONITOR stamps an EVALSHA before the script runs, and
// the script's clock is read after that. Formatting a large argument for
// MONITOR stalls the server in between, as a descheduled server does: a
// key whose TTL runs out meanwhile is free to the script, which takes it.
// The replay must not count that as a foreign write (however long the
// stall turns out to be, no R1 may be reported).
func TestMonitorScriptClockOnServer(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	mon, err := startMonitor(srv.Addr(), clock)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := t.Context()
	set := redis.NewScript(`redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1`)
	take := redis.NewScript(`local v = redis.call('GET', KEYS[1])
if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
return v`)
	for _, s := range []*redis.Script{set, take} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	big := strings.Repeat("x", 4<<20) // MONITOR formats it byte by byte
	if err := set.Run(ctx, rdb, []string{"k"}, "A", 50).Err(); err != nil {
		t.Fatal(err)
	}
	v, err := take.Run(ctx, rdb, []string{"k"}, "B", 1000, big).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	lines := mon.Stop()
	st := analyzeMonitor(lines, map[string]bool{"k": true}, map[string]bool{"A": true, "B": true}, 0, never)
	if st.Foreign != 0 {
		t.Fatalf("foreign writes: %v", st.Details)
	}
	if v != nil {
		t.Logf("the script ran before A's lock expired (%v): the stall was too short to show anything", v)
	}
}

// Multi-key locks under a lost grant reply and a late acquire (sent after
// its caller gave up and withdrew the token) never write a key another
// token holds, by the server's own log, and leave nothing held: the
// withdrawal frees the lost grant's keys, and the late acquire finds the
// token's tombstone.
func TestMultiKeyFaultsNoForeignWrite(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	mon, err := startMonitor(srv.Addr(), clock)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	client := func(inj *faultcmd.Injector) *dlock.Client {
		r := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = r.Close() })
		if inj != nil {
			r.AddHook(inj)
		}
		c, err := dlock.New(r, dlock.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	injA := faultcmd.New()
	a, b := client(injA), client(nil)
	m1, m2, m3 := "mk:1", "mk:2", "mk:3"
	owned := map[string]bool{}
	take := func(keys ...string) {
		t.Helper()
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		lk, err := b.LockMulti(lctx, keys)
		if err != nil {
			t.Fatalf("LockMulti%v after the faults: %v", keys, err)
		}
		owned[lk.Token()] = true
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The grant runs, its reply is lost: A withdraws it, B gets the keys.
	injA.Add(faultcmd.Rule{Name: "lost grant", Action: faultcmd.DropReply, Match: faultcmd.Match{Script: "multi_acquire"}})
	if _, err := a.TryLockMulti(ctx, []string{m1, m2}); err == nil {
		t.Fatal("TryLockMulti succeeded through a lost reply")
	}
	take(m2, m1)

	// The acquire is sent after A gave up and withdrew the token.
	injA.Add(faultcmd.Rule{Name: "late acquire", Action: faultcmd.Late, Match: faultcmd.Match{Script: "multi_acquire"},
		Until: faultcmd.Match{Script: "multi_release"}})
	if _, err := a.TryLockMulti(ctx, []string{m2, m3}); err == nil {
		t.Fatal("TryLockMulti succeeded through a late acquire")
	}
	for sent := false; !sent; {
		for _, e := range injA.Log() {
			sent = sent || (e.Rule == "late acquire" && strings.HasPrefix(e.Outcome, "sent"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n, err := rdb.Exists(ctx, m1, m2, m3).Result(); err != nil || n != 0 {
		t.Fatalf("%d keys held after the late acquire (%v)", n, err)
	}
	take(m3, m2, m1)

	lines := mon.Stop()
	st := analyzeMonitor(lines, map[string]bool{m1: true, m2: true, m3: true}, owned, 0, never)
	if st.Foreign != 0 {
		t.Fatalf("foreign writes: %v", st.Details)
	}
}

// PEXPIRE GT (the renewal scripts' form) only ever moves an expiry later:
// the monitor must not believe a key expires sooner than Redis makes it.
func TestMonitorPexpireGT(t *testing.T) {
	noEnd := func(string, *keyState, int64) {}
	ms := int64(time.Millisecond)
	s := &keyState{known: true, value: "A", exp: 10000 * ms, expHi: 10010 * ms}
	at := when{lo: 100 * ms, hi: 100 * ms, base: 100 * ms, line: 101 * ms}
	applyWrite("k", s, "PEXPIRE", []string{"PEXPIRE", "k", "0", "GT"}, at, true, noEnd)
	applyWrite("k", s, "PEXPIRE", []string{"PEXPIRE", "k", "1", "GT"}, at, true, noEnd)
	if !s.known || s.value != "A" || s.exp != 10000*ms || s.expHi != 10010*ms {
		t.Fatalf("after shorter PEXPIRE GTs: %+v, want the expiry unchanged", *s)
	}
	applyWrite("k", s, "PEXPIRE", []string{"PEXPIRE", "k", "50000", "GT"}, at, true, noEnd)
	if s.exp != 50100*ms || s.expHi != 50101*ms {
		t.Fatalf("after a longer PEXPIRE GT: %+v, want it moved later", *s)
	}
	p := &keyState{known: true, value: "B"} // no TTL: GT leaves it without one
	applyWrite("k", p, "PEXPIRE", []string{"PEXPIRE", "k", "5000", "GT"}, at, true, noEnd)
	if p.exp != 0 {
		t.Fatalf("PEXPIRE GT gave a key without a TTL one: %+v", *p)
	}
}

// Valkey 8 and Redis 7.2+ base a PX inside a script on the script's time
// snapshot, its start: a server stalled inside A's script (its SET line
// 4.6ms after the EVALSHA's) gives A's lock an expiry that early, and B's
// later script finding it gone and writing the key is no foreign write.
func TestMonitorPXFromScriptStart(t *testing.T) {
	line := func(t int64, lua bool, args ...string) monLine { return monLine{T: t, Lua: lua, Args: args} }
	us := int64(time.Microsecond)
	lines := []monLine{
		line(18100*us, false, "evalsha", "s", "3", "k", "f", "q", "A", "300", "10300", "try"),
		line(22600*us, true, "LINDEX", "q", "0"),
		line(22700*us, true, "SET", "k", "A", "NX", "PX", "300", "GET"),
		line(319800*us, false, "evalsha", "s", "3", "k", "f", "q", "B", "1000", "11000", "q"),
		line(319800*us, true, "GET", "k"),
		line(319900*us, true, "SET", "k", "B", "PX", "1000"),
	}
	st := analyzeMonitor(lines, map[string]bool{"k": true}, map[string]bool{"A": true, "B": true}, 0, never)
	if st.Foreign != 0 {
		t.Fatalf("foreign writes: %v", st.Details)
	}
}
