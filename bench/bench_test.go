package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestQuick runs the whole benchmark in --quick mode, every scenario and
// every library configuration, against a redis-server of its own, and
// checks that no lock ever let two holders in and that every library
// completed critical sections everywhere.
func TestQuick(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	b, err := runAll(ctx, options{Quick: true, RoundTimeout: 10 * time.Second, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
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
	writeMarkdown(&md, b)
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
	if !strings.Contains(md.String(), "## Goals") {
		t.Error("Markdown lacks the goals")
	}

	var js bytes.Buffer
	if err := writeJSON(&js, b); err != nil {
		t.Fatal(err)
	}
	var out jsonOutput
	if err := json.Unmarshal(js.Bytes(), &out); err != nil {
		t.Fatalf("JSON does not parse: %v", err)
	}
	if len(out.Runs) != len(b.Outcomes) || len(out.Goals) == 0 {
		t.Errorf("JSON: %d runs, %d goals", len(out.Runs), len(out.Goals))
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
	for _, args := range [][]string{{"--lib", "("}, {"--duration", "-1s"}, {"extra"}, {"--round-timeout", "0"}} {
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
