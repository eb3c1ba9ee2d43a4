package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/benchkit"
)

// ms formats a latency in milliseconds with about three significant
// digits; "–" when there were no samples.
func ms(d time.Duration, samples int) string {
	if samples == 0 {
		return "–"
	}
	v := benchkit.MS(d)
	switch {
	case v < 1:
		return fmt.Sprintf("%.3f", v)
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// thousands formats v rounded, with thousands separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func perSection(v float64) string {
	if v < 0 {
		return "–"
	}
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// fairness is min/max of critical sections per client (1 for a single
// client; 0 if some client got none).
func fairness(r benchkit.Result) float64 {
	lo, hi := r.Fairness()
	if hi == 0 {
		return 0
	}
	return float64(lo) / float64(hi)
}

func (o outcome) fairnessCell() string {
	lo, hi := o.Res.Fairness()
	return fmt.Sprintf("%d/%d = %.2f", lo, hi, fairness(o.Res))
}

// writeMarkdown writes the whole benchmark as Markdown.
func writeMarkdown(w io.Writer, b *benchmark) {
	m := b.Machine
	fmt.Fprintf(w, "# Lock benchmark: dlock, redsync, bsm/redislock, rueidislock\n\n")
	fmt.Fprintf(w, "- Date: %s\n", m.Date)
	fmt.Fprintf(w, "- Machine: %d CPUs (GOMAXPROCS %d), %s, %s; %s started by the benchmark on %s (no persistence), shared with the clients\n",
		m.CPUs, m.GOMAXPROCS, m.OS, m.GoVersion, m.RedisVersion, m.RedisAddr)
	fmt.Fprintf(w, "- Load average (1/5/15 min): before %s, after %s; total time %s\n", m.LoadBefore, m.LoadAfter, m.TotalDuration)
	fmt.Fprintf(w, "- Command: `%s`\n", m.Command)
	dur := "each scenario's default (below)"
	switch {
	case b.Opts.Duration > 0:
		dur = b.Opts.Duration.String()
	case b.Opts.Quick:
		dur = quickDuration.String() + " (--quick)"
	}
	fmt.Fprintf(w, "- Duration per scenario: %s; drain rounds bounded by %v\n\n", dur, b.Opts.RoundTimeout)

	fmt.Fprintf(w, "## Settings\n\n| name | library | settings |\n|---|---|---|\n")
	seen := map[string]bool{}
	for _, o := range b.Outcomes {
		if !seen[o.Lib.Name] {
			seen[o.Lib.Name] = true
			fmt.Fprintf(w, "| %s | %s | %s |\n", o.Lib.Name, o.Lib.Library, o.Lib.Settings)
		}
	}
	fmt.Fprintln(w)

	fmt.Fprintf(w, "## Results\n\n")
	fmt.Fprintf(w, "CS/s: critical sections (acquire+release pairs) per second. Hand-off: a holder's release → the next holder's acquire returning, in ms, for acquirers already waiting. ")
	fmt.Fprintf(w, "Cmds/CS: Redis commands per critical section (INFO commandstats delta, commands inside scripts included). Redis CPU: the server's CPU time (INFO used_cpu_sys + used_cpu_user delta) per critical section, in µs. RT/CS: client round trips per critical section. ")
	fmt.Fprintf(w, "Fairness: fewest/most critical sections of any client = min/max. Failures: failed or timed-out acquisitions and releases (see below). PING: round trip p50 in ms, idle before the run / while it ran.\n\n")
	var failures []string
	for i := 0; i < len(b.Outcomes); {
		s := b.Outcomes[i].Scenario
		fmt.Fprintf(w, "### %s\n\n%s; %v", s.Name, s.Desc, b.Outcomes[i].Duration)
		if s.Drain {
			fmt.Fprintf(w, " of rounds")
		}
		fmt.Fprintf(w, ".\n\n")
		fmt.Fprintf(w, "| library | CS/s | hand-off p50 | p99 | max | cmds/CS | Redis CPU µs/CS | RT/CS | fairness | overlaps | failures | PING p50 |\n")
		fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for ; i < len(b.Outcomes) && b.Outcomes[i].Scenario.Name == s.Name; i++ {
			o := b.Outcomes[i]
			if o.Err != nil {
				fmt.Fprintf(w, "| %s | run failed: %s ||||||||||\n", o.Lib.Name, oneLine(o.Err.Error()))
				continue
			}
			r := o.Res
			fail := fmt.Sprint(o.Failures())
			if o.Failures() > 0 {
				fail = fmt.Sprintf("**%d**", o.Failures())
				failures = append(failures, fmt.Sprintf("- %s / %s: %d failed acquisitions, %d failed releases, %d missed drain rounds; first: %s",
					s.Name, o.Lib.Name, r.AcquireErrors, r.ReleaseErrors, r.Missed, oneLine(fmt.Sprint(r.FirstError))))
			}
			overlaps := fmt.Sprint(r.Overlaps)
			if r.Overlaps > 0 {
				overlaps = fmt.Sprintf("**%d**", r.Overlaps)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s |\n",
				o.Lib.Name, thousands(r.PerSecond()),
				ms(r.Handoff.P50, r.Handoff.N), ms(r.Handoff.P99, r.Handoff.N), ms(r.Handoff.Max, r.Handoff.N),
				perSection(r.CommandsPerSection()), cpuPerSection(r), perSection(r.RoundTripsPerSection()),
				o.fairnessCell(), overlaps, fail,
				ms(r.PingIdle.P50, r.PingIdle.N), ms(r.Ping.P50, r.Ping.N))
		}
		fmt.Fprintln(w)
	}
	if len(failures) > 0 {
		fmt.Fprintf(w, "## Failures\n\n%s\n\n", strings.Join(failures, "\n"))
	}
	if gs := goals(b); len(gs) > 0 {
		fmt.Fprintf(w, "## Goals (dlock defaults, this run)\n\n| goal | measured | met |\n|---|---|---|\n")
		for _, g := range gs {
			met := "no"
			if g.Met {
				met = "yes"
			}
			fmt.Fprintf(w, "| %s | %s | %s |\n", g.Goal, g.Measured, met)
		}
		fmt.Fprintln(w)
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", "; ")
	s = strings.ReplaceAll(s, "|", "\\|")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// goal is one hand-off goal, evaluated on this run.
type goal struct {
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

func (b *benchmark) find(scenario, lib string) (outcome, bool) {
	for _, o := range b.Outcomes {
		if o.Scenario.Name == scenario && o.Lib.Name == lib && o.Err == nil {
			return o, true
		}
	}
	return outcome{}, false
}

// goals evaluates the goals whose scenarios ran.
func goals(b *benchmark) []goal {
	var gs []goal
	for _, sc := range []string{"drain-16", "drain-128", "drain-256"} {
		o, ok := b.find(sc, "dlock")
		if !ok {
			continue
		}
		r := o.Res
		ping, idle := r.Ping.P50, r.PingIdle.P50
		if sc != "drain-256" {
			gs = append(gs, goal{
				Goal: sc + ": hand-off p50 ≤ 3 × PING p50 (PING measured while the run ran)",
				Measured: fmt.Sprintf("%s ms vs PING %s ms = %.1f× (idle PING %s ms: %.1f×)",
					ms(r.Handoff.P50, r.Handoff.N), ms(ping, r.Ping.N), ratio(r.Handoff.P50, ping),
					ms(idle, r.PingIdle.N), ratio(r.Handoff.P50, idle)),
				Met: r.Handoff.N > 0 && r.Ping.N > 0 && r.Handoff.P50 <= 3*ping,
			}, goal{
				Goal:     sc + ": hand-off p99 ≤ 1 ms",
				Measured: ms(r.Handoff.P99, r.Handoff.N) + " ms",
				Met:      r.Handoff.N > 0 && r.Handoff.P99 <= time.Millisecond,
			})
		}
		gs = append(gs, goal{
			Goal:     sc + ": ≤ 12 Redis commands per critical section",
			Measured: fmt.Sprintf("%s (%s round trips)", perSection(r.CommandsPerSection()), perSection(r.RoundTripsPerSection())),
			Met:      r.Sections > 0 && r.CommandsPerSection() >= 0 && r.CommandsPerSection() <= 12,
		})
	}
	for _, sc := range []string{"contended-16-hold1ms", "contended-128-hold1ms"} {
		if o, ok := b.find(sc, "dlock"); ok {
			gs = append(gs, goal{
				Goal:     sc + ": fairness min/max ≥ 0.9",
				Measured: o.fairnessCell() + fmt.Sprintf(" over %v", o.Duration),
				Met:      fairness(o.Res) >= 0.9,
			})
		}
	}
	// best returns the fastest of the configurations names in scenario sc.
	best := func(sc string, names ...string) (outcome, bool) {
		var top outcome
		found := false
		for _, n := range names {
			if o, ok := b.find(sc, n); ok && (!found || o.Res.PerSecond() > top.Res.PerSecond()) {
				top, found = o, true
			}
		}
		return top, found
	}
	bsm := []string{"bsm", "bsm-linear1ms"}
	for _, g := range []struct {
		sc     string
		factor float64
		peers  []string
		what   string
	}{
		{"uncontended-1", 1, bsm, "bsm/redislock"},
		{"uncontended-16", 1.3, []string{"rueidislock", "rueidislock-km1", "rueidislock-km1-nocsc"}, "rueidislock"},
		{"uncontended-64", 1.3, []string{"rueidislock", "rueidislock-km1", "rueidislock-km1-nocsc"}, "rueidislock"},
	} {
		d, ok := b.find(g.sc, "dlock")
		if !ok {
			continue
		}
		p, ok := best(g.sc, g.peers...)
		if !ok {
			continue
		}
		gs = append(gs, goal{
			Goal: fmt.Sprintf("%s: pairs/s ≥ %g × %s", g.sc, g.factor, g.what),
			Measured: fmt.Sprintf("dlock %s vs %s %s = %.2f×", thousands(d.Res.PerSecond()), p.Lib.Name, thousands(p.Res.PerSecond()),
				d.Res.PerSecond()/p.Res.PerSecond()),
			Met: d.Res.PerSecond() >= g.factor*p.Res.PerSecond(),
		})
	}
	for _, sc := range []string{"uncontended-1", "uncontended-16", "uncontended-64"} {
		d, ok := b.find(sc, "dlock")
		p, ok2 := best(sc, bsm...)
		if !ok || !ok2 || d.Res.ServerCPUPerSection() < 0 || p.Res.ServerCPUPerSection() <= 0 {
			continue
		}
		dc, pc := d.Res.ServerCPUPerSection(), p.Res.ServerCPUPerSection()
		gs = append(gs, goal{
			Goal: sc + ": Redis CPU per pair ≤ 1.2 × bsm/redislock's",
			Measured: fmt.Sprintf("dlock %s µs vs %s %s µs = %.2f×", cpuPerSection(d.Res), p.Lib.Name, cpuPerSection(p.Res),
				float64(dc)/float64(pc)),
			Met: float64(dc) <= 1.2*float64(pc),
		})
	}
	var overlaps int64
	runs := 0
	for _, o := range b.Outcomes {
		if o.Err == nil {
			overlaps += o.Res.Overlaps
			runs++
		}
	}
	if runs > 0 {
		gs = append(gs, goal{
			Goal:     "zero overlaps everywhere (every library, every scenario)",
			Measured: fmt.Sprintf("%d overlaps in %d runs", overlaps, runs),
			Met:      overlaps == 0,
		})
	}
	return gs
}

// cpuPerSection is the Redis CPU cell: µs per critical section.
func cpuPerSection(r benchkit.Result) string {
	d := r.ServerCPUPerSection()
	if d < 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond))
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return math.Inf(1)
	}
	return float64(a) / float64(b)
}

// jsonRun is one outcome in the JSON output.
type jsonRun struct {
	Scenario  string  `json:"scenario"`
	Library   string  `json:"library"`
	DurationS float64 `json:"duration_s"`
	Error     string  `json:"error,omitempty"`
	*benchkit.Report
	HandoffMaxMS         float64 `json:"handoff_max_ms"`
	RoundTrips           int64   `json:"round_trips"`
	RoundTripsPerSection float64 `json:"round_trips_per_section"`
	Fairness             float64 `json:"fairness"`
	Rounds               int     `json:"drain_rounds"`
	Missed               int64   `json:"drain_missed"`
	Failures             int64   `json:"failures"`
}

type jsonScenario struct {
	scenario
	HoldMS float64 `json:"hold_ms"`
}

type jsonOutput struct {
	Machine   machine        `json:"machine"`
	Libraries []lib          `json:"libraries"`
	Scenarios []jsonScenario `json:"scenarios"`
	Runs      []jsonRun      `json:"runs"`
	Goals     []goal         `json:"goals"`
}

func writeJSON(w io.Writer, b *benchmark) error {
	out := jsonOutput{Machine: b.Machine, Goals: goals(b), Runs: []jsonRun{}}
	seenL, seenS := map[string]bool{}, map[string]bool{}
	for _, o := range b.Outcomes {
		if !seenL[o.Lib.Name] {
			seenL[o.Lib.Name] = true
			out.Libraries = append(out.Libraries, o.Lib)
		}
		if !seenS[o.Scenario.Name] {
			seenS[o.Scenario.Name] = true
			out.Scenarios = append(out.Scenarios, jsonScenario{o.Scenario, benchkit.MS(o.Scenario.Hold)})
		}
		jr := jsonRun{Scenario: o.Scenario.Name, Library: o.Lib.Name, DurationS: o.Duration.Seconds()}
		if o.Err != nil {
			jr.Error = o.Err.Error()
		} else {
			rep := o.Res.Report()
			jr.Report = &rep
			jr.HandoffMaxMS = benchkit.MS(o.Res.Handoff.Max)
			jr.RoundTrips = o.Res.RoundTrips
			jr.RoundTripsPerSection = o.Res.RoundTripsPerSection()
			jr.Fairness = fairness(o.Res)
			jr.Rounds = o.Res.Rounds
			jr.Missed = o.Res.Missed
			jr.Failures = o.Failures()
		}
		out.Runs = append(out.Runs, jr)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
