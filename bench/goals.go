package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// goal is one of dlock's targets, evaluated on one run: Value, a ratio
// of two figures of that run (or a figure), against Limit.
type goal struct {
	Goal     string
	Measured string  // the figures behind Value
	Value    float64 // NaN: not measured (a missing sample, a zero divisor)
	Limit    float64
	AtLeast  bool   // met when Value ≥ Limit; otherwise when Value ≤ Limit
	Total    bool   // over several runs the sum counts, not the median
	Unit     string // how Value reads: "×", "ms", "cmds", "count" or "" (a fraction)
}

// met reports whether v meets g; NaN never does.
func (g goal) met(v float64) bool {
	if g.AtLeast {
		return v >= g.Limit
	}
	return v <= g.Limit
}

// format writes v in g's unit; "–" when not measured.
func (g goal) format(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	switch g.Unit {
	case "×":
		return fmt.Sprintf("%.2f×", v)
	case "ms":
		return fmt.Sprintf("%.3f ms", v)
	case "cmds":
		return fmt.Sprintf("%.1f", v)
	case "count":
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3f", v) // a fraction: 0.986 must not read as 0.99
}

// div is a/b, or NaN if b is not positive or a is negative (not measured).
func div(a, b float64) float64 {
	if b <= 0 || a < 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

func (b *benchmark) find(scenario, lib string) (outcome, bool) {
	for _, o := range b.Outcomes {
		if o.Scenario.Name == scenario && o.Lib.Name == lib && o.Err == nil {
			return o, true
		}
	}
	return outcome{}, false
}

// goals evaluates, on one run, the goals whose scenarios and libraries ran.
func goals(b *benchmark) []goal {
	gs := throughputGoals(b)
	gs = append(gs, cpuGoals(b)...)
	gs = append(gs, contendedGoals(b)...)
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
			Measured: fmt.Sprintf("%d overlaps in %d scenario × library runs", overlaps, runs),
			Value:    float64(overlaps), Total: true, Unit: "count",
		})
	}
	return gs
}

// pairTime is the time of one uncontended pair in µs (NaN: none done).
func pairTime(o outcome) float64 {
	return div(1e6, o.Res.PerSecond())
}

// throughputGoals: uncontended pairs/s against the reference and peers.
func throughputGoals(b *benchmark) []goal {
	var gs []goal
	if d, ok := b.find("uncontended-1", "dlock"); ok {
		if p, ok := b.find("uncontended-1", "simplest"); ok {
			gs = append(gs, goal{
				Goal: "uncontended-1: dlock's pair time ≤ 1.15 × the simplest pair's (SET NX PX + EVALSHA compare-and-delete)",
				Measured: fmt.Sprintf("dlock %.1f µs (%s/s) vs simplest %.1f µs (%s/s)",
					pairTime(d), thousands(d.Res.PerSecond()), pairTime(p), thousands(p.Res.PerSecond())),
				Value: div(pairTime(d), pairTime(p)), Limit: 1.15, Unit: "×",
			})
		}
	}
	for _, g := range []struct{ sc, peer string }{
		{"uncontended-1", "bsm"}, {"uncontended-1", "redsync"},
		{"uncontended-16", "rueidislock-km1"}, {"uncontended-64", "rueidislock-km1"},
	} {
		d, ok := b.find(g.sc, "dlock")
		p, ok2 := b.find(g.sc, g.peer)
		if !ok || !ok2 {
			continue
		}
		gs = append(gs, goal{
			Goal:     fmt.Sprintf("%s: pairs/s ≥ 1.0 × %s's", g.sc, g.peer),
			Measured: fmt.Sprintf("dlock %s vs %s %s", thousands(d.Res.PerSecond()), g.peer, thousands(p.Res.PerSecond())),
			Value:    div(d.Res.PerSecond(), p.Res.PerSecond()), Limit: 1, AtLeast: true, Unit: "×",
		})
	}
	return gs
}

// cpuGoals: the server's CPU per uncontended pair against bsm's.
func cpuGoals(b *benchmark) []goal {
	var gs []goal
	for _, sc := range []string{"uncontended-1", "uncontended-16"} {
		d, ok := b.find(sc, "dlock")
		p, ok2 := b.find(sc, "bsm")
		if !ok || !ok2 {
			continue
		}
		gs = append(gs, goal{
			Goal:     sc + ": Redis CPU per pair ≤ 1.3 × bsm's",
			Measured: fmt.Sprintf("dlock %s µs vs bsm %s µs", cpuPerSection(d.Res), cpuPerSection(p.Res)),
			Value:    div(float64(d.Res.ServerCPUPerSection()), float64(p.Res.ServerCPUPerSection())),
			Limit:    1.3, Unit: "×",
		})
	}
	return gs
}

// contendedGoals: hand-off, commands per critical section, fairness.
func contendedGoals(b *benchmark) []goal {
	var gs []goal
	for _, sc := range []string{"drain-16", "drain-128"} {
		o, ok := b.find(sc, "dlock")
		if !ok {
			continue
		}
		r := o.Res
		p50, p99 := math.NaN(), math.NaN()
		if r.Handoff.N > 0 {
			p50, p99 = div(float64(r.Handoff.P50), float64(r.Ping.P50)), float64(r.Handoff.P99)/float64(time.Millisecond)
		}
		gs = append(gs, goal{
			Goal: sc + ": hand-off p50 ≤ 3 × PING p50 (PING measured while the run ran)",
			Measured: fmt.Sprintf("%s ms vs PING %s ms (idle PING %s ms)", ms(r.Handoff.P50, r.Handoff.N),
				ms(r.Ping.P50, r.Ping.N), ms(r.PingIdle.P50, r.PingIdle.N)),
			Value: p50, Limit: 3, Unit: "×",
		}, goal{
			Goal: sc + ": hand-off p99 ≤ 1 ms", Measured: ms(r.Handoff.P99, r.Handoff.N) + " ms",
			Value: p99, Limit: 1, Unit: "ms",
		})
		if sc == "drain-16" {
			gs = append(gs, goal{
				Goal:     sc + ": ≤ 12 Redis commands per critical section",
				Measured: fmt.Sprintf("%s (%s round trips)", perSection(r.CommandsPerSection()), perSection(r.RoundTripsPerSection())),
				Value:    div(float64(r.Commands), float64(r.Sections)), Limit: 12, Unit: "cmds",
			})
		}
	}
	if o, ok := b.find("contended-16-hold1ms", "dlock"); ok {
		gs = append(gs, goal{
			Goal:     "contended-16-hold1ms: fairness min/max ≥ 0.99",
			Measured: o.fairnessCell() + fmt.Sprintf(" over %v", o.Duration),
			Value:    fairness(o.Res), Limit: 0.99, AtLeast: true,
		})
	}
	return gs
}

// goalSummary is one goal over every run: its value in each (NaN where
// it was not measured or did not run) and their median, or their sum for
// a Total goal.
type goalSummary struct {
	goal
	PerRun []float64
	Agg    float64
	Met    bool
}

// summarize gathers each goal's values over the runs, in the order the
// goals first appear.
func summarize(runs [][]goal) []goalSummary {
	var out []goalSummary
	index := map[string]int{}
	for r, gs := range runs {
		for _, g := range gs {
			i, ok := index[g.Goal]
			if !ok {
				i = len(out)
				index[g.Goal] = i
				per := make([]float64, len(runs))
				for j := range per {
					per[j] = math.NaN()
				}
				out = append(out, goalSummary{goal: g, PerRun: per})
			}
			out[i].PerRun[r] = g.Value
		}
	}
	for i := range out {
		s := &out[i]
		s.Agg = aggregate(s.goal, s.PerRun)
		s.Met = s.met(s.Agg)
	}
	return out
}

// aggregate is the median of vs (or their sum for a Total goal), a value
// not measured counting as the worst there is.
func aggregate(g goal, vs []float64) float64 {
	worst := math.Inf(1)
	if g.AtLeast {
		worst = math.Inf(-1)
	}
	s := make([]float64, len(vs))
	for i, v := range vs {
		s[i] = v
		if math.IsNaN(v) {
			s[i] = worst
		}
	}
	if g.Total {
		var sum float64
		for _, v := range s {
			sum += v
		}
		return sum
	}
	return median(s)
}

// median of vs (the mean of the middle two for an even count); NaN for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
