package faults

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
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
	var events []event
	if err := json.Unmarshal(b, &events); err != nil {
		t.Fatal(err)
	}
	p := defaultParams()
	if os.Getenv("DLOCK_FAULTS_PLAIN") == "1" {
		p.FencedResource = false
	}
	r := check(events, nil, p)
	for _, d := range r.Details {
		fmt.Println(d)
	}
	// Which partitions S3 rejects.
	parts := map[string][]porcupine.Operation{}
	for _, op := range modelOps(pairOps(events), p.FencedResource) {
		k := op.Metadata.(string)
		parts[k] = append(parts[k], op)
	}
	for k, ops := range parts {
		if res, _ := porcupine.CheckOperationsVerbose(model(), ops, 20*time.Second); res != porcupine.Ok {
			fmt.Printf("S3 %v: %s (%d operations)\n", res, k, len(ops))
			// The longest partial linearization, and the operation that
			// returned first among those it could not place.
			_, info := porcupine.CheckOperationsVerbose(model(), ops, 20*time.Second)
			m := model()
			show := func(tag string, op porcupine.Operation) {
				ret := "never"
				if op.Return < never-1 {
					ret = dur(op.Return)
				}
				fmt.Printf("   %s %s-%s p%d %s\n", tag, dur(op.Call), ret, op.ClientId, m.DescribeOperation(op.Input, op.Output))
			}
			var best []porcupine.Operation
			for _, part := range info.PartialLinearizationsOperations() {
				for _, lin := range part {
					if len(lin) > len(best) {
						best = lin
					}
				}
			}
			placed := map[int64]bool{}
			for _, op := range best {
				placed[op.Call*31+op.Return] = true
			}
			for _, op := range best[max(0, len(best)-8):] {
				show("lin ", op)
			}
			var stuck *porcupine.Operation
			for i := range ops {
				if !placed[ops[i].Call*31+ops[i].Return] && (stuck == nil || ops[i].Return < stuck.Return) {
					stuck = &ops[i]
				}
			}
			if stuck != nil {
				show("STUCK", *stuck)
			}
		}
	}
	key := os.Getenv("DLOCK_FAULTS_KEY")
	for _, op := range pairOps(events) {
		if key != "" && !strings.Contains(op.Key, key) && op.Kind != kindFault && op.Kind != kindPause {
			continue
		}
		ret := "never"
		if op.Return != never {
			ret = dur(op.Return)
		}
		fmt.Printf("%9s-%9s p%-3d %-8s %-6s %-40s f=%d o=%s mode=%s grp=%s dl=%s sent=%s ttl=%s %s %s\n",
			dur(op.Call), ret, op.Proc, op.Kind, op.Status, op.Key, op.Fence, short(op.Owner), op.Mode, op.Group,
			dur(op.Deadline), dur(op.Sent), dur(op.TTL), op.Err, op.Note)
	}
}
