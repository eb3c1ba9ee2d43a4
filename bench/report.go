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

// writeMarkdown writes the whole benchmark as Markdown: every run's
// tables, then the goals.
func writeMarkdown(w io.Writer, s *series) {
	writeHeader(w, s)
	fmt.Fprintf(w, "## Results\n\n")
	fmt.Fprintf(w, "CS/s: critical sections (acquire+release pairs) per second. Hand-off: a holder's release → the next holder's acquire returning, in ms, for acquirers already waiting. ")
	fmt.Fprintf(w, "Cmds/CS: Redis commands per critical section (INFO commandstats delta, commands inside scripts included). Redis CPU: the server's CPU time (INFO used_cpu_sys + used_cpu_user delta) per critical section, in µs. RT/CS: client round trips per critical section. ")
	fmt.Fprintf(w, "Fairness: fewest/most critical sections of any client = min/max. Failures: failed or timed-out acquisitions and releases (see below). PING: round trip p50 in ms, idle before the run / while it ran.\n\n")
	for _, b := range s.Runs {
		if len(s.Runs) > 1 {
			fmt.Fprintf(w, "## Run %d of %d\n\n%s; load average before %s, after %s; %s.\n\n",
				b.Run, len(s.Runs), b.Machine.Date, b.Machine.LoadBefore, b.Machine.LoadAfter, b.Machine.TotalDuration)
		}
		writeRun(w, b)
		writeServerTime(w, b)
	}
	writeGoals(w, s)
}

func writeHeader(w io.Writer, s *series) {
	m := s.Machine
	fmt.Fprintf(w, "# Lock benchmark: dlock, redsync, bsm/redislock, rueidislock\n\n")
	fmt.Fprintf(w, "- Date: %s\n", m.Date)
	fmt.Fprintf(w, "- Machine: %d CPUs (GOMAXPROCS %d), %s, %s; %s started by the benchmark on %s (no persistence), shared with the clients\n",
		m.CPUs, m.GOMAXPROCS, m.OS, m.GoVersion, m.RedisVersion, m.RedisAddr)
	fmt.Fprintf(w, "- Load average (1/5/15 min): before %s, after %s; total time %s\n", m.LoadBefore, m.LoadAfter, m.TotalDuration)
	fmt.Fprintf(w, "- Command: `%s`\n", m.Command)
	dur := "each scenario's default (below)"
	switch {
	case s.Opts.Duration > 0:
		dur = s.Opts.Duration.String()
	case s.Opts.Quick:
		dur = quickDuration.String() + " (--quick)"
	}
	fmt.Fprintf(w, "- Duration per scenario: %s; drain rounds bounded by %v\n", dur, s.Opts.RoundTimeout)
	fmt.Fprintf(w, "- Runs: %d (every scenario and library once per run, in turn)\n\n", len(s.Runs))

	fmt.Fprintf(w, "## Settings\n\n| name | library | settings |\n|---|---|---|\n")
	seen := map[string]bool{}
	for _, o := range s.outcomes() {
		if !seen[o.Lib.Name] {
			seen[o.Lib.Name] = true
			fmt.Fprintf(w, "| %s | %s | %s |\n", o.Lib.Name, o.Lib.Library, o.Lib.Settings)
		}
	}
	fmt.Fprintln(w)
}

// writeRun writes one run's table per scenario, and its failures.
func writeRun(w io.Writer, b *benchmark) {
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
		fmt.Fprintf(w, "### Failures\n\n%s\n\n", strings.Join(failures, "\n"))
	}
}

// writeGoals writes the goals of a single run with their figures, or, over
// several runs, each run's value and their median.
func writeGoals(w io.Writer, s *series) {
	runs := make([][]goal, len(s.Runs))
	for i, b := range s.Runs {
		runs[i] = goals(b)
	}
	sum := summarize(runs)
	if len(sum) == 0 {
		return
	}
	if len(runs) == 1 {
		fmt.Fprintf(w, "## Goals (dlock defaults, this run)\n\n| goal | measured | value | met |\n|---|---|--:|---|\n")
		for _, g := range sum {
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", g.Goal, g.Measured, g.format(g.Agg), yesNo(g.Met))
		}
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, "## Goals (medians of %d runs)\n\nEach run's value is a ratio (or figure) of that run; the median is of those values (overlaps: their sum). ", len(runs))
	fmt.Fprintf(w, "A run in which a goal was not measured counts as missing it.\n\n| goal |")
	for i := range runs {
		fmt.Fprintf(w, " run %d |", i+1)
	}
	fmt.Fprintf(w, " median | met |\n|---|%s--:|---|\n", strings.Repeat("--:|", len(runs)))
	for _, g := range sum {
		fmt.Fprintf(w, "| %s |", g.Goal)
		for _, v := range g.PerRun {
			fmt.Fprintf(w, " %s |", g.format(v))
		}
		agg := g.format(g.Agg)
		if g.Total {
			agg = "total " + agg
		}
		fmt.Fprintf(w, " %s | %s |\n", agg, yesNo(g.Met))
	}
	fmt.Fprintln(w)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", "; ")
	s = strings.ReplaceAll(s, "|", "\\|")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// cpuPerSection is the Redis CPU cell: µs per critical section.
func cpuPerSection(r benchkit.Result) string {
	d := r.ServerCPUPerSection()
	if d < 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond))
}

// jsonRun is one outcome in the JSON output.
type jsonRun struct {
	Run       int     `json:"run"`
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

// jsonGoal is one goal in one run; Value is null where not measured.
type jsonGoal struct {
	Run      int      `json:"run"`
	Goal     string   `json:"goal"`
	Measured string   `json:"measured"`
	Value    *float64 `json:"value"`
	Limit    float64  `json:"limit"`
	AtLeast  bool     `json:"at_least"`
	Met      bool     `json:"met"`
}

// jsonGoalSummary is one goal over every run: median (or total) of the
// per-run values.
type jsonGoalSummary struct {
	Goal      string     `json:"goal"`
	Limit     float64    `json:"limit"`
	AtLeast   bool       `json:"at_least"`
	PerRun    []*float64 `json:"per_run"`
	Aggregate string     `json:"aggregate"` // "median" or "total"
	Value     *float64   `json:"value"`
	Met       bool       `json:"met"`
}

type jsonOutput struct {
	Machine     machine           `json:"machine"`
	RunMachines []machine         `json:"run_machines"`
	Libraries   []lib             `json:"libraries"`
	Scenarios   []jsonScenario    `json:"scenarios"`
	Runs        []jsonRun         `json:"runs"`
	Goals       []jsonGoal        `json:"goals"`
	GoalMedians []jsonGoalSummary `json:"goal_medians"`
	ServerTime  []serverTime      `json:"server_time_by_command"`
}

// num is v, or nil if it is not a number JSON can carry.
func num(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func writeJSON(w io.Writer, s *series) error {
	out := jsonOutput{Machine: s.Machine, Runs: []jsonRun{}, Goals: []jsonGoal{}, ServerTime: []serverTime{}}
	seenL, seenS := map[string]bool{}, map[string]bool{}
	var runGoals [][]goal
	for _, b := range s.Runs {
		out.RunMachines = append(out.RunMachines, b.Machine)
		for _, o := range b.Outcomes {
			if !seenL[o.Lib.Name] {
				seenL[o.Lib.Name] = true
				out.Libraries = append(out.Libraries, o.Lib)
			}
			if !seenS[o.Scenario.Name] {
				seenS[o.Scenario.Name] = true
				out.Scenarios = append(out.Scenarios, jsonScenario{o.Scenario, benchkit.MS(o.Scenario.Hold)})
			}
			out.Runs = append(out.Runs, newJSONRun(b.Run, o))
		}
		gs := goals(b)
		runGoals = append(runGoals, gs)
		for _, g := range gs {
			out.Goals = append(out.Goals, jsonGoal{Run: b.Run, Goal: g.Goal, Measured: g.Measured,
				Value: num(g.Value), Limit: g.Limit, AtLeast: g.AtLeast, Met: g.met(g.Value)})
		}
		out.ServerTime = append(out.ServerTime, serverTimes(b)...)
	}
	for _, g := range summarize(runGoals) {
		js := jsonGoalSummary{Goal: g.Goal, Limit: g.Limit, AtLeast: g.AtLeast, Aggregate: "median", Value: num(g.Agg), Met: g.Met}
		if g.Total {
			js.Aggregate = "total"
		}
		for _, v := range g.PerRun {
			js.PerRun = append(js.PerRun, num(v))
		}
		out.GoalMedians = append(out.GoalMedians, js)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func newJSONRun(run int, o outcome) jsonRun {
	jr := jsonRun{Run: run, Scenario: o.Scenario.Name, Library: o.Lib.Name, DurationS: o.Duration.Seconds()}
	if o.Err != nil {
		jr.Error = o.Err.Error()
		return jr
	}
	rep := o.Res.Report()
	jr.Report = &rep
	jr.HandoffMaxMS = benchkit.MS(o.Res.Handoff.Max)
	jr.RoundTrips = o.Res.RoundTrips
	jr.RoundTripsPerSection = o.Res.RoundTripsPerSection()
	jr.Fairness = fairness(o.Res)
	jr.Rounds = o.Res.Rounds
	jr.Missed = o.Res.Missed
	jr.Failures = o.Failures()
	return jr
}
