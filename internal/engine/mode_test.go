package engine

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/scripts"
)

// TestModeArgs: every mode names one of the modes acquire.lua documents,
// and no two modes name the same.
func TestModeArgs(t *testing.T) {
	seen := map[string]Mode{}
	acquire, _ := scripts.Of(scripts.Acquire)
	for _, m := range Modes {
		arg := m.String()
		if !strings.Contains(acquire.Src, "'"+arg+"'") {
			t.Errorf("mode %d: acquire.lua does not know %q", m, arg)
		}
		if prev, ok := seen[arg]; ok {
			t.Errorf("modes %d and %d both send %q", prev, m, arg)
		}
		seen[arg] = m
		if want := arg == "q1" || arg == "q"; m.Queued() != want {
			t.Errorf("%q: Queued() = %v, want %v", arg, m.Queued(), want)
		}
	}
}
