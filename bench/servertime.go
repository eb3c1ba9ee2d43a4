package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// serverTimeScenario is the scenario whose server time is broken down by
// command: one pair at a time, so nothing but the lock's own commands.
const serverTimeScenario = "uncontended-1"

// cmdTime is one command's share of a critical section.
type cmdTime struct {
	Name       string  `json:"command"`
	Calls      float64 `json:"calls_per_section"`
	UsecPerCS  float64 `json:"usec_per_section"`
	UsecPerCmd float64 `json:"usec_per_call"`
}

// serverTime is one library's server time per critical section, by command.
type serverTime struct {
	Run        int       `json:"run"`
	Scenario   string    `json:"scenario"`
	Library    string    `json:"library"`
	Sections   int64     `json:"critical_sections"`
	CPUPerCSUS float64   `json:"redis_cpu_per_section_us"` // -1: not measured
	Commands   []cmdTime `json:"by_command"`               // most time first
}

// serverTimes breaks down the server time of every library's run of
// serverTimeScenario in b.
func serverTimes(b *benchmark) []serverTime {
	var out []serverTime
	for _, o := range b.Outcomes {
		r := o.Res
		if o.Scenario.Name != serverTimeScenario || o.Err != nil || r.Sections == 0 || r.ServerTimeByCommand == nil {
			continue
		}
		st := serverTime{Run: b.Run, Scenario: o.Scenario.Name, Library: o.Lib.Name, Sections: r.Sections, CPUPerCSUS: -1}
		if d := r.ServerCPUPerSection(); d >= 0 {
			st.CPUPerCSUS = float64(d) / float64(time.Microsecond)
		}
		n := float64(r.Sections)
		for name, calls := range r.ByCommand {
			us := float64(r.ServerTimeByCommand[name]) / float64(time.Microsecond)
			st.Commands = append(st.Commands, cmdTime{Name: name, Calls: float64(calls) / n,
				UsecPerCS: us / n, UsecPerCmd: us / float64(calls)})
		}
		slices.SortFunc(st.Commands, func(a, b cmdTime) int {
			return cmp.Or(cmp.Compare(b.UsecPerCS, a.UsecPerCS), strings.Compare(a.Name, b.Name))
		})
		out = append(out, st)
	}
	return out
}

// writeServerTime writes b's server time per pair by command, if
// serverTimeScenario ran.
func writeServerTime(w io.Writer, b *benchmark) {
	sts := serverTimes(b)
	if len(sts) == 0 {
		return
	}
	fmt.Fprintf(w, "### Server time per %s pair, by command\n\n", serverTimeScenario)
	fmt.Fprintf(w, "INFO commandstats usec per critical section, by command, with calls per critical section in parentheses. ")
	fmt.Fprintf(w, "A script's FCALL, EVALSHA or EVAL includes the time of the commands it calls, which are listed under their own names too. ")
	fmt.Fprintf(w, "Redis CPU also counts what the server does around the commands (reading, parsing, replying, the event loop).\n\n")
	fmt.Fprintf(w, "| library | Redis CPU µs/CS | µs/CS by command (calls/CS) |\n|---|--:|---|\n")
	for _, st := range sts {
		parts := make([]string, len(st.Commands))
		for i, c := range st.Commands {
			parts[i] = fmt.Sprintf("%s %.1f (%.1f)", c.Name, c.UsecPerCS, c.Calls)
		}
		cpu := "–"
		if st.CPUPerCSUS >= 0 {
			cpu = fmt.Sprintf("%.1f", st.CPUPerCSUS)
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", st.Library, cpu, strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
}
