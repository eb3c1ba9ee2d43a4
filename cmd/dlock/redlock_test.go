package main

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestRunRedlock(t *testing.T) {
	t.Parallel()
	nodes := []*redistest.Server{
		redistest.Start(t, redistest.Config{ExtraArgs: []string{"--requirepass", "s3cret"}}),
		redistest.Start(t, redistest.Config{ExtraArgs: []string{"--requirepass", "s3cret"}}),
		redistest.Start(t, redistest.Config{ExtraArgs: []string{"--requirepass", "s3cret"}}),
	}
	var urls []string
	for _, n := range nodes {
		urls = append(urls, "redis://:s3cret@"+n.Addr()+"/0")
	}
	key := testKey(t)
	// The command runs under the lock and sees its fence.
	script := `test -n "$DLOCK_FENCE" && test "$DLOCK_FENCE" != 0 && echo "fence=$DLOCK_FENCE"`
	r := dlockRun(t, nil, "run", "--redlock", strings.Join(urls, ","), key, "--", "sh", "-c", script)
	expectCode(t, r, 0)
	if !strings.Contains(r.stdout, "fence=") {
		t.Fatalf("no fence in the command's environment:\n%v", r)
	}

	// One node down: a majority remains, so it runs (with a warning).
	_ = nodes[2].Kill()
	r = dlockRun(t, nil, "run", "--redlock", strings.Join(urls, ","), key, "--", "true")
	expectCode(t, r, 0)
	expectStderr(t, r, "does not answer")

	// Two down: no majority, exit 125, addresses named, password never shown.
	_ = nodes[1].Kill()
	r = dlockRun(t, nil, "run", "--redlock", strings.Join(urls, ","), key, "--", "true")
	expectCode(t, r, 125)
	expectStderr(t, r, "no majority", nodes[1].Addr())
	if strings.Contains(r.stderr, "s3cret") {
		t.Fatalf("password printed:\n%v", r)
	}

	// Usage errors.
	expectCode(t, dlockRun(t, nil, "run", "--redlock", strings.Join(urls, ","), "--protocol", "legacy", key, "--", "true"), 2)
}
