package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func TestElectUsage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no name", []string{"elect"}, 2, "missing NAME"},
		{"no command", []string{"elect", "N"}, 2, "missing COMMAND"},
		{"-c and command", []string{"elect", "-c", "true", "N", "true"}, 2, "either -c"},
		{"kill-after", []string{"elect", "--ttl", "1s", "--kill-after", "1s", "N", "true"}, 2, "at most TTL/2"},
		{"reserved name", []string{"elect", "dlock:{x}:fence", "true"}, 4, "fence key of lock"},
		{"not found", []string{"elect", "N", "no-such-command-dlock-test"}, 127, "elect: no-such-command-dlock-test: command not found"},
		{"leader without name", []string{"leader"}, 2, "exactly one NAME"},
		{"observe without name", []string{"observe"}, 2, "exactly one NAME"},
		{"observe bad poll", []string{"observe", "--poll", "0", "N"}, 2, "--poll"},
		{"help", []string{"help", "elect"}, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string(nil), tc.args...)
			for i, a := range args {
				if a == "N" {
					args[i] = testKey(t)
				}
			}
			r := dlockRun(t, nil, onSrv(args...)...)
			expectCode(t, r, tc.code)
			expectStderr(t, r, tc.stderr)
		})
	}
}

// elect runs the command as leader, with the term in its environment;
// leader shows it; after it exits there is no leader.
func TestElectLeader(t *testing.T) {
	t.Parallel()
	name := testKey(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "env")
	p := startDlock(t, nil, onSrv("elect", name, "--id", "node-1", "-c",
		`echo "$DLOCK_TERM $DLOCK_LEADER_ID $DLOCK_KEY" > `+out+`.tmp; mv `+out+`.tmp `+out+`; sleep 30`)...)
	waitFor(t, 20*time.Second, "the command to run", func() bool { return fileExists(out) })
	b, _ := os.ReadFile(out)
	f := strings.Fields(string(b))
	if len(f) != 3 || f[1] != "node-1" || f[2] != name {
		t.Fatalf("command's environment: %q", b)
	}
	r := dlockRun(t, nil, onSrv("leader", name)...)
	expectCode(t, r, 0)
	if !strings.Contains(r.stdout, "node-1") || !strings.Contains(r.stdout, f[0]) {
		t.Fatalf("leader output lacks node-1 and term %s:\n%v", f[0], r)
	}
	r = dlockRun(t, nil, onSrv("leader", name, "--json")...)
	expectCode(t, r, 0)
	var v struct {
		Leader bool
		Value  string
		Term   uint64
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || !v.Leader || v.Value != "node-1" || strconv.FormatUint(v.Term, 10) != f[0] {
		t.Fatalf("leader --json: %v %+v\n%v", err, v, r)
	}
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)
	r = dlockRun(t, nil, onSrv("leader", name)...)
	expectCode(t, r, exitFree)
	if !strings.Contains(r.stdout, "no leader") {
		t.Fatalf("after the leader's exit:\n%v", r)
	}
}

// kill -9 of the leading dlock: its command's tree dies with it (the guard
// sees its pipe close), and the next candidate's command runs, with a
// higher term, within the TTL. observe prints both leaders in order.
func TestElectKillTakeover(t *testing.T) {
	t.Parallel()
	name := testKey(t)
	dir := t.TempDir()
	obs := startDlock(t, nil, onSrv("observe", name, "--json", "--poll", "100ms")...)
	// Nobody leads yet: observe says so first.
	waitFor(t, 20*time.Second, "observe's first no-leader line", func() bool {
		return strings.Contains(obs.out(), `"leader":false`)
	})
	run := func(id string) *proc {
		return startDlock(t, nil, onSrv("elect", name, "--id", id, "--ttl", "2s", "-c",
			`echo $DLOCK_TERM > `+filepath.Join(dir, id)+`.tmp; mv `+filepath.Join(dir, id)+`.tmp `+filepath.Join(dir, id)+`; echo $$ > `+filepath.Join(dir, id)+`.pid; sleep 60`)...)
	}
	a := run("a")
	waitFor(t, 20*time.Second, "a to lead", func() bool { return fileExists(filepath.Join(dir, "a")) })
	b := run("b")
	_, rdb := lib(t)
	q := adminOn(t, rdb).KeysFor(name).Queue
	waitFor(t, 20*time.Second, "b to queue", func() bool { return rdb.LLen(context.Background(), q).Val() == 1 })
	pidA, _ := os.ReadFile(filepath.Join(dir, "a.pid"))
	a.signal(syscall.SIGKILL)
	killed := time.Now()
	waitFor(t, 20*time.Second, "b to lead", func() bool { return fileExists(filepath.Join(dir, "b")) })
	t.Logf("b's command runs %v after a's dlock was killed (TTL 2s)", time.Since(killed).Round(time.Millisecond))
	ta, _ := os.ReadFile(filepath.Join(dir, "a"))
	tb, _ := os.ReadFile(filepath.Join(dir, "b"))
	termA, _ := strconv.ParseUint(strings.TrimSpace(string(ta)), 10, 64)
	termB, _ := strconv.ParseUint(strings.TrimSpace(string(tb)), 10, 64)
	if termB <= termA || termA == 0 {
		t.Fatalf("terms a %d, b %d", termA, termB)
	}
	if pid, _ := strconv.Atoi(strings.TrimSpace(string(pidA))); pid > 0 {
		waitFor(t, 10*time.Second, "a's command to die with its dlock", func() bool { return syscall.Kill(pid, 0) != nil })
	}
	b.signal(syscall.SIGTERM)
	b.wait(30 * time.Second)
	// observe prints that nobody leads, a, then b, then (b resigned,
	// nobody queued) that nobody leads. Between a's lease running out and b taking the lock
	// nobody led either: a "no leader" line may come between a and b.
	lines := func() []string { return strings.Split(strings.TrimSpace(obs.out()), "\n") }
	waitFor(t, 20*time.Second, "observe's no-leader line", func() bool {
		l := lines()
		return strings.Contains(l[len(l)-1], `"leader":false`)
	})
	obs.signal(syscall.SIGINT)
	r := obs.wait(10 * time.Second)
	expectCode(t, r, 0)
	var terms []uint64
	out := strings.Split(strings.TrimSpace(r.stdout), "\n")
	for i, line := range out {
		var v struct {
			Leader bool
			Value  string
			Term   uint64
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("observe line %q: %v", line, err)
		}
		if !v.Leader {
			if i > 0 && !strings.Contains(out[i-1], `"leader":true`) || v.Term != 0 {
				t.Fatalf("observe's no-leader line %d %q:\n%v", i, line, r)
			}
			continue
		}
		terms = append(terms, v.Term)
	}
	if len(terms) != 2 || terms[0] != termA || terms[1] != termB {
		t.Fatalf("observe printed terms %v, want [%d %d]:\n%v", terms, termA, termB, r)
	}
}

// --again campaigns again after the command exits; a lost leadership
// stops the command's tree and exits 124 without --again.
func TestElectAgainAndLoss(t *testing.T) {
	t.Parallel()
	name := testKey(t)
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	p := startDlock(t, nil, onSrv("elect", name, "--again", "-c", `echo x >> `+count)...)
	waitFor(t, 20*time.Second, "three terms", func() bool {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "x") >= 3
	})
	p.signal(syscall.SIGTERM)
	r := p.wait(30 * time.Second)
	if r.code != 0 && r.code != 128+15 {
		t.Fatalf("--again after SIGTERM: %v", r)
	}

	lost := testKey(t)
	started := filepath.Join(dir, "started")
	q := startDlock(t, nil, onSrv("elect", lost, "--ttl", "3s", "-c", `touch `+started+`; sleep 60`)...)
	waitFor(t, 20*time.Second, "the command", func() bool { return fileExists(started) })
	_, rdb := lib(t)
	rdb.Del(context.Background(), lost)
	r = q.wait(30 * time.Second)
	expectCode(t, r, exitLost)
	expectStderr(t, r, "elect: lost the lock")
	_ = dlock.ErrLost
}

// observe on a name whose key holds another type ends as leader does:
// the same message (its own command's name first) and exit 4, instead of
// waiting for ever.
func TestObserveWrongTypeExitsLikeLeader(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	name := testKey(t)
	if err := rdb.HSet(context.Background(), name, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), name) })
	leader := dlockRun(t, nil, onSrv("leader", name)...)
	expectCode(t, leader, exitNotLock)
	obs := startDlock(t, nil, onSrv("observe", name, "--poll", "50ms")...).wait(20 * time.Second)
	expectCode(t, obs, exitNotLock)
	want := strings.Replace(strings.TrimSpace(leader.stderr), "leader:", "observe:", 1)
	if got := strings.TrimSpace(obs.stderr); got != want {
		t.Fatalf("observe's stderr %q, want %q (leader's, named observe)", got, want)
	}
}

// The guard's messages under 'dlock elect' are elect's: a killed dlock's
// tree gets SIGTERM, said with "elect:", not "run:".
func TestElectGuardMessagesSayElect(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	name := testKey(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	script := `trap 'exit 0' TERM; ` + writePid(pidFile) + `; while :; do sleep 0.05; done`
	p := startDlock(t, nil, onSrv("elect", "--ttl", "3s", "--kill-after", "1s", name, "-c", script)...)
	pid := readPid(t, pidFile)
	killAtCleanup(t, pid)
	p.signal(syscall.SIGKILL)
	keyOutlivesTree(t, rdb, name, []int{pid}, "dlock was killed")
	r := p.wait(60 * time.Second)
	expectStderr(t, r, "elect: dlock is gone", "SIGTERM")
	if strings.Contains(r.stderr, "run:") {
		t.Errorf("a message under elect says run:\n%v", r)
	}
}

// observe on an election nobody leads says so at once, and then prints
// the leader when one is elected.
func TestObserveNoLeaderAtStart(t *testing.T) {
	t.Parallel()
	name := testKey(t)
	obs := startDlock(t, nil, onSrv("observe", name, "--poll", "100ms")...)
	waitFor(t, 20*time.Second, "observe's no-leader line", func() bool {
		return strings.Contains(obs.out(), "no leader")
	})
	c, _ := lib(t)
	ctx := context.Background()
	l, err := c.Election(name, dlock.ElectionOptions{}).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	waitFor(t, 20*time.Second, "observe's leader line", func() bool {
		return strings.Contains(obs.out(), "leader a ")
	})
	obs.signal(syscall.SIGINT)
	r := obs.wait(10 * time.Second)
	expectCode(t, r, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], "  no leader") || !strings.Contains(lines[1], "  leader a  term ") {
		t.Fatalf("observe printed %q, want a no-leader line, then a", lines)
	}
}
