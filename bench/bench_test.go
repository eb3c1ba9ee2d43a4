package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/benchkit"
)

// TestQuick runs the whole benchmark in --quick mode, every scenario and
// every library configuration, against a redis-server of its own, and
// checks that no lock ever let two holders in and that every library
// completed critical sections everywhere.
func TestQuick(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	all, err := runAll(ctx, options{Quick: true, RoundTimeout: 10 * time.Second, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(all.Runs))
	}
	b := all.Runs[0]
	t.Logf("progress:\n%s", progress.String())
	ss, ls := selected(options{})
	if want := len(ss) * len(ls); len(b.Outcomes) != want {
		t.Fatalf("%d runs, want %d", len(b.Outcomes), want)
	}
	for _, o := range b.Outcomes {
		name := o.Scenario.Name + " / " + o.Lib.Name
		switch {
		case o.Err != nil:
			t.Errorf("%s: the run failed: %v", name, o.Err)
		case o.Res.Overlaps != 0 && o.Lib.Library == "dlock":
			t.Errorf("%s: %d overlapping critical sections", name, o.Res.Overlaps)
		case o.Res.Sections == 0:
			t.Errorf("%s: no critical section completed (%d failures, first: %v)", name, o.Failures(), o.Res.FirstError)
		case o.Res.Commands <= 0 || o.Res.RoundTrips <= 0:
			t.Errorf("%s: commands %d, round trips %d: not measured", name, o.Res.Commands, o.Res.RoundTrips)
		case o.Res.Ping.N == 0:
			t.Errorf("%s: no PING measured during the run", name)
		}
		if o.Res.Overlaps != 0 && o.Lib.Library != "dlock" {
			// A peer's broken lock is a finding the report shows in bold,
			// not a defect of this benchmark.
			t.Logf("%s: %d overlapping critical sections", name, o.Res.Overlaps)
		}
		if o.Failures() > 0 {
			// Peers may give up under load; that is a result, not a test failure.
			t.Logf("%s: %d failures, first: %v", name, o.Failures(), o.Res.FirstError)
		}
	}

	var md bytes.Buffer
	writeMarkdown(&md, all)
	for _, l := range ls {
		if !strings.Contains(md.String(), "| "+l.Name+" |") {
			t.Errorf("Markdown lacks a row for %s", l.Name)
		}
	}
	for _, s := range ss {
		if !strings.Contains(md.String(), "### "+s.Name+"\n") {
			t.Errorf("Markdown lacks a section for %s", s.Name)
		}
	}
	if v := b.Machine.RedisVersion; !strings.HasPrefix(v, "Redis ") && !strings.HasPrefix(v, "Valkey ") ||
		!strings.Contains(md.String(), v+" started by the benchmark") {
		t.Errorf("Markdown does not name the server by its release (%q)", v)
	}
	for _, want := range []string{"## Goals (dlock defaults, this run)", "pair time ≤ 1.15 × the simplest pair's",
		"uncontended-1: pairs/s ≥ 1.0 × bsm's", "uncontended-1: pairs/s ≥ 1.0 × redsync's",
		"uncontended-16: pairs/s ≥ 1.0 × rueidislock-km1's", "uncontended-64: pairs/s ≥ 1.0 × rueidislock-km1's",
		"uncontended-1: Redis CPU per pair ≤ 1.3 × bsm's", "uncontended-16: Redis CPU per pair ≤ 1.3 × bsm's",
		"drain-16: hand-off p50 ≤ 3 × PING", "drain-16: hand-off p99 ≤ 1 ms", "drain-16: ≤ 12 Redis commands",
		"contended-16-hold1ms: fairness min/max ≥ 0.99", "zero overlaps", "### Server time per uncontended-1 pair"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("Markdown:\n%s", md.String())
	}

	var js bytes.Buffer
	if err := writeJSON(&js, all); err != nil {
		t.Fatal(err)
	}
	var out jsonOutput
	if err := json.Unmarshal(js.Bytes(), &out); err != nil {
		t.Fatalf("JSON does not parse: %v", err)
	}
	if len(out.Runs) != len(b.Outcomes) || len(out.Goals) != 14 || len(out.GoalMedians) != len(out.Goals) {
		t.Errorf("JSON: %d runs, %d goals, %d goal medians", len(out.Runs), len(out.Goals), len(out.GoalMedians))
	}
	if len(out.ServerTime) != len(ls) {
		t.Errorf("JSON: server time of %d libraries, want %d", len(out.ServerTime), len(ls))
	}
	for _, st := range out.ServerTime {
		if st.Library != "simplest" {
			continue
		}
		// The reference pair is SET, then EVALSHA calling GET and DEL.
		calls := map[string]float64{}
		for _, c := range st.Commands {
			calls[c.Name] = c.Calls
		}
		for _, name := range []string{"set", "evalsha", "get", "del"} {
			if calls[name] < 1 || calls[name] > 1.5 || len(calls) != 4 {
				t.Errorf("simplest: %s called %.2f times per pair (%v)", name, calls[name], calls)
			}
		}
	}
	for _, r := range out.Runs {
		if r.Report == nil || r.Sections == 0 || r.Overlaps != 0 && strings.HasPrefix(r.Library, "dlock") {
			t.Errorf("JSON run %s / %s: %+v", r.Scenario, r.Library, r.Report)
		}
	}
}

func TestFlags(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"--list", "--lib", "^dlock", "--scenario", "drain"}, &out, &errs); code != 0 {
		t.Fatalf("--list: exit %d: %s", code, errs.String())
	}
	got := out.String()
	if !strings.Contains(got, "drain-16") || strings.Contains(got, "uncontended") ||
		!strings.Contains(got, "dlock-barging") || strings.Contains(got, "redsync") {
		t.Errorf("--list with filters:\n%s", got)
	}
	for _, args := range [][]string{{"--lib", "("}, {"--duration", "-1s"}, {"extra"}, {"--round-timeout", "0"}, {"--runs", "0"}} {
		if code := run(args, &out, &errs); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	if code := run([]string{"--lib", "nothing-matches"}, &out, &errs); code != 1 {
		t.Errorf("no library selected: exit %d, want 1", code)
	}
}

func TestFormatting(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
	for d, want := range map[time.Duration]string{
		215 * time.Microsecond: "0.215", 1500 * time.Microsecond: "1.50",
		15 * time.Millisecond: "15.0", 155 * time.Millisecond: "155",
	} {
		if got := ms(d, 1); got != want {
			t.Errorf("ms(%v) = %q, want %q", d, got, want)
		}
	}
	if ms(time.Second, 0) != "–" {
		t.Error("no samples")
	}
}

// TestRuns runs two scenarios and three libraries twice and checks that
// every run is reported and the goals carry each run's value and their
// median.
func TestRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all, err := runAll(ctx, options{Quick: true, Runs: 2, RoundTimeout: 10 * time.Second,
		Scenarios: regexp.MustCompile("^(uncontended-1|drain-16)$"), Libs: regexp.MustCompile("^(dlock|simplest|bsm)$")})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Runs) != 2 || len(all.Runs[0].Outcomes) != 6 || len(all.Runs[1].Outcomes) != 6 {
		t.Fatalf("%d runs", len(all.Runs))
	}
	var md, js bytes.Buffer
	writeMarkdown(&md, all)
	for _, want := range []string{"## Run 1 of 2", "## Run 2 of 2", "## Goals (medians of 2 runs)",
		"| goal | run 1 | run 2 | median | met |", "pair time ≤ 1.15 × the simplest pair's"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
	if err := writeJSON(&js, all); err != nil {
		t.Fatal(err)
	}
	var out jsonOutput
	if err := json.Unmarshal(js.Bytes(), &out); err != nil {
		t.Fatalf("JSON does not parse: %v", err)
	}
	// uncontended-1: pair time vs simplest, pairs/s and CPU vs bsm;
	// drain-16: p50, p99, commands; overlaps.
	if len(out.Runs) != 12 || len(out.RunMachines) != 2 || len(out.Goals) != 14 || len(out.GoalMedians) != 7 ||
		len(out.ServerTime) != 6 {
		t.Fatalf("JSON: %d runs, %d machines, %d goals, %d medians, %d server times",
			len(out.Runs), len(out.RunMachines), len(out.Goals), len(out.GoalMedians), len(out.ServerTime))
	}
	for _, g := range out.GoalMedians {
		if len(g.PerRun) != 2 || g.PerRun[0] == nil || g.PerRun[1] == nil || g.Value == nil {
			t.Errorf("%s: per run %v, value %v", g.Goal, g.PerRun, g.Value)
			continue
		}
		want := (*g.PerRun[0] + *g.PerRun[1]) / 2
		if g.Aggregate == "total" {
			want *= 2
		}
		if math.Abs(*g.Value-want) > 1e-9 {
			t.Errorf("%s: %s %v of %v and %v", g.Goal, g.Aggregate, *g.Value, *g.PerRun[0], *g.PerRun[1])
		}
	}
}

// TestGoalMedians: a goal's value is a ratio within one run; over runs
// the median counts, a run that did not measure it counts as missing it,
// and overlaps are summed.
func TestGoalMedians(t *testing.T) {
	pairs := func(name string, n int64) outcome {
		return outcome{Scenario: scenario{Name: "uncontended-1"}, Lib: lib{Name: name},
			Res: benchkit.Result{Sections: n, Elapsed: time.Second, Commands: -1, ServerCPU: -1, RoundTrips: -1}}
	}
	run := func(n int, d, simplest, bsm int64) *benchmark {
		return &benchmark{Run: n, Outcomes: []outcome{pairs("dlock", d), pairs("simplest", simplest), pairs("bsm", bsm)}}
	}
	r1, r2, r3 := run(1, 1000, 2000, 1000), run(2, 1000, 1100, 2000), run(3, 1000, 1000, 500)
	r3.Outcomes[1].Err = errors.New("the simplest run failed") // the goal is left out of run 3
	byGoal := map[string]goalSummary{}
	for _, g := range summarize([][]goal{goals(r1), goals(r2), goals(r3)}) {
		byGoal[g.Goal] = g
	}
	simplest := byGoal["uncontended-1: dlock's pair time ≤ 1.15 × the simplest pair's (SET NX PX + EVALSHA compare-and-delete)"]
	bsm := byGoal["uncontended-1: pairs/s ≥ 1.0 × bsm's"]
	cpu := byGoal["uncontended-1: Redis CPU per pair ≤ 1.3 × bsm's"]
	switch {
	case len(simplest.PerRun) != 3 || simplest.PerRun[0] != 2 || math.Abs(simplest.PerRun[1]-1.1) > 1e-9 || !math.IsNaN(simplest.PerRun[2]):
		t.Errorf("pair time ratios %v, want 2, 1.1, NaN", simplest.PerRun)
	case simplest.Agg != 2 || simplest.Met:
		// The median of 1.1, 2 and the missing run counted as the worst.
		t.Errorf("pair time median %v met %v", simplest.Agg, simplest.Met)
	case bsm.PerRun[0] != 1 || bsm.PerRun[1] != 0.5 || bsm.PerRun[2] != 2 || bsm.Agg != 1 || !bsm.Met:
		t.Errorf("bsm ratios %v, median %v met %v", bsm.PerRun, bsm.Agg, bsm.Met)
	case !math.IsNaN(cpu.PerRun[0]) || cpu.Met:
		t.Errorf("CPU not measured: %v, met %v", cpu.PerRun, cpu.Met)
	}
	if _, ok := byGoal["uncontended-1: pairs/s ≥ 1.0 × redsync's"]; ok {
		t.Error("a goal whose peer never ran is reported")
	}
	over := goal{Total: true, Unit: "count"}
	if got := aggregate(over, []float64{0, 2, 0}); got != 2 {
		t.Errorf("overlaps over runs: %v, want their sum 2", got)
	}
	if got := median([]float64{3, 1, 2, 10}); got != 2.5 {
		t.Errorf("median of an even count: %v", got)
	}
}

// TestGoalFormat: a fraction just under its limit does not print as the
// limit.
func TestGoalFormat(t *testing.T) {
	g := goal{Limit: 0.99, AtLeast: true}
	if got := g.format(0.986); got == "0.99" || g.met(0.986) {
		t.Errorf("0.986 against ≥ 0.99 reads %q, met %v", got, g.met(0.986))
	}
	if got := (goal{Unit: "×"}).format(math.NaN()); got != "–" {
		t.Errorf("NaN reads %q", got)
	}
}
