package benchkit

import (
	"fmt"
	"time"
)

// Report is a Result in plain units, for JSON: durations in milliseconds
// or seconds as the field names say. Values that were not measured are
// -1 (commands) or 0 (latencies without samples).
type Report struct {
	Clients               int              `json:"clients"`
	Keys                  int              `json:"keys"`
	HoldMS                float64          `json:"hold_ms"`
	ElapsedS              float64          `json:"elapsed_s"`
	Sections              int64            `json:"critical_sections"`
	SectionsPerS          float64          `json:"critical_sections_per_s"`
	HandoffSamples        int              `json:"handoff_samples"`
	HandoffP50MS          float64          `json:"handoff_p50_ms"`
	HandoffP99MS          float64          `json:"handoff_p99_ms"`
	AcquireP50MS          float64          `json:"acquire_p50_ms"`
	AcquireP99MS          float64          `json:"acquire_p99_ms"`
	Commands              int64            `json:"redis_commands"`
	CommandsPerSection    float64          `json:"redis_commands_per_section"`
	ByCommand             map[string]int64 `json:"redis_commands_by_name,omitempty"`
	ServerCPUPerSectionUS float64          `json:"redis_cpu_per_section_us"`
	FairnessMin           int64            `json:"fairness_min"`
	FairnessMax           int64            `json:"fairness_max"`
	PerClient             []int64          `json:"per_client"`
	Overlaps              int64            `json:"overlaps"`
	AcquireErrors         int64            `json:"acquire_errors"`
	ReleaseErrors         int64            `json:"release_errors"`
	FirstError            string           `json:"first_error,omitempty"`
	PingP50MS             float64          `json:"ping_rtt_p50_ms"`
	PingIdleP50MS         float64          `json:"ping_rtt_idle_p50_ms"`
}

// Report converts r.
func (r Result) Report() Report {
	lo, hi := r.Fairness()
	rep := Report{
		Clients:               r.Clients,
		Keys:                  r.Keys,
		HoldMS:                MS(r.Hold),
		ElapsedS:              r.Elapsed.Seconds(),
		Sections:              r.Sections,
		SectionsPerS:          r.PerSecond(),
		HandoffSamples:        r.Handoff.N,
		HandoffP50MS:          MS(r.Handoff.P50),
		HandoffP99MS:          MS(r.Handoff.P99),
		AcquireP50MS:          MS(r.Acquire.P50),
		AcquireP99MS:          MS(r.Acquire.P99),
		Commands:              r.Commands,
		CommandsPerSection:    r.CommandsPerSection(),
		ByCommand:             r.ByCommand,
		ServerCPUPerSectionUS: -1,
		FairnessMin:           lo,
		FairnessMax:           hi,
		PerClient:             r.PerClient,
		Overlaps:              r.Overlaps,
		AcquireErrors:         r.AcquireErrors,
		ReleaseErrors:         r.ReleaseErrors,
		PingP50MS:             MS(r.Ping.P50),
		PingIdleP50MS:         MS(r.PingIdle.P50),
	}
	if d := r.ServerCPUPerSection(); d >= 0 {
		rep.ServerCPUPerSectionUS = float64(d) / float64(time.Microsecond)
	}
	if r.FirstError != nil {
		rep.FirstError = r.FirstError.Error()
	}
	return rep
}

// MS converts d to milliseconds.
func MS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// FormatDuration formats a duration with 3 significant digits (1.23s,
// 45.6ms, 789µs).
func FormatDuration(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0fms", MS(d))
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", MS(d))
	}
	return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
}
