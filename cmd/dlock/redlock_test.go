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

// --redlock splits only before "scheme://": a password with a comma works
// and is never printed, not even in part.
func TestRedlockCommaPassword(t *testing.T) {
	t.Parallel()
	const pass = "pa,ss-w0rd,xyz"
	var urls []string
	var nodes []*redistest.Server
	for range 3 {
		n := redistest.Start(t, redistest.Config{ExtraArgs: []string{"--requirepass", pass}})
		nodes = append(nodes, n)
		urls = append(urls, "redis://:"+pass+"@"+n.Addr()+"/0")
	}
	key := testKey(t)
	r := dlockRun(t, nil, "run", "--redlock", strings.Join(urls, ","), key, "--", "true")
	expectCode(t, r, 0)
	_ = nodes[1].Kill()
	_ = nodes[2].Kill()
	r = dlockRun(t, nil, "run", "--redlock", strings.Join(urls, ","), key, "--", "true")
	expectCode(t, r, 125)
	for _, part := range strings.Split(pass, ",") {
		if strings.Contains(r.stderr, part) {
			t.Errorf("part %q of the password printed:\n%v", part, r)
		}
	}
}

// One server under two addresses is refused by its identity.
func TestRedlockSameServerTwice(t *testing.T) {
	t.Parallel()
	other := redistest.Start(t, redistest.Config{})
	port := srv.Addr()[strings.LastIndexByte(srv.Addr(), ':')+1:]
	urls := "redis://" + srv.Addr() + "/0,redis://localhost:" + port + "/0,redis://" + other.Addr() + "/0"
	r := dlockRun(t, nil, "run", "--redlock", urls, testKey(t), "--", "true")
	expectCode(t, r, 2)
	expectStderr(t, r, "one Redis server", "same run_id")
}
