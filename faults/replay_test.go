package faults

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestReplay re-checks a saved history (DLOCK_FAULTS_REPLAY=file.json)
// and prints the operations of DLOCK_FAULTS_KEY (a substring of the key),
// for post-mortems. Without the variable it does nothing.
func TestReplay(t *testing.T) {
	path := os.Getenv("DLOCK_FAULTS_REPLAY")
	if path == "" {
		t.Skip("DLOCK_FAULTS_REPLAY=file.json replays a saved history")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var events []Event
	if err := json.Unmarshal(b, &events); err != nil {
		t.Fatal(err)
	}
	p := DefaultParams()
	if os.Getenv("DLOCK_FAULTS_PLAIN") == "1" {
		p.FencedResource = false
	}
	r := Check(events, nil, p)
	for _, d := range r.Details {
		fmt.Println(d)
	}
	key := os.Getenv("DLOCK_FAULTS_KEY")
	for _, op := range Ops(events) {
		if key != "" && !strings.Contains(op.Key, key) && op.Kind != KFault && op.Kind != KPause {
			continue
		}
		ret := "never"
		if op.Return != Never {
			ret = Dur(op.Return)
		}
		fmt.Printf("%9s-%9s p%-3d %-8s %-6s %-40s f=%d o=%s mode=%s grp=%s dl=%s sent=%s ttl=%s %s %s\n",
			Dur(op.Call), ret, op.Proc, op.Kind, op.Status, op.Key, op.Fence, short(op.Owner), op.Mode, op.Group,
			Dur(op.Deadline), Dur(op.Sent), Dur(op.TTL), op.Err, op.Note)
	}
}
