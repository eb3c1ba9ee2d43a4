package dlock_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
)

// Two values proclaimed between two reads of an observer are both
// delivered, in order: the history keeps a record per Proclaim.
func TestObserveDeliversEveryProclaimedValue(t *testing.T) {
	ctx := t.Context()
	oc, inj := faultyClient(t, dlock.Options{})
	lc, _ := newClient(t, dlock.Options{})
	name := key(t)
	opts := dlock.ElectionOptions{TTL: 10 * time.Second, PollInterval: 50 * time.Millisecond}
	l, err := newElection(t, lc, name, opts).Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	ch := newElection(t, oc, name, opts).Observe(ctx)
	next := func() dlock.LeaderInfo {
		t.Helper()
		select {
		case li := <-ch:
			return li
		case <-time.After(20 * time.Second):
			t.Fatal("nothing observed")
		}
		return dlock.LeaderInfo{}
	}
	if li := next(); li.Value != "v1" || li.Rev != 1 {
		t.Fatalf("first observed %+v, want v1, rev 1", li)
	}
	// No read succeeds while the leader proclaims twice.
	blind := inj.Add(faultcmd.Rule{Name: "no reads", Action: faultcmd.FailBefore, Times: -1,
		Match: faultcmd.Match{Script: "elect_read", Key: name}})
	for _, v := range []string{"v2", "v3"} {
		if err := l.Proclaim(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	blind.Remove()
	for i, want := range []string{"v2", "v3"} {
		if li := next(); li.Value != want || li.Term != l.Term() || li.Rev != uint64(i+2) || li.Missed {
			t.Fatalf("observed %+v, want %s, term %d, rev %d", li, want, l.Term(), i+2)
		}
	}
}
