package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestRunExitCodes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noShebang := filepath.Join(dir, "garbage")
	if err := os.WriteFile(noShebang, []byte("\x7fELF garbage"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"child status", []string{"run", "K", "--", "sh", "-c", "exit 7"}, 7, ""},
		{"child status without --", []string{"run", "K", "sh", "-c", "exit 0"}, 0, ""},
		{"flags after KEY go to the command", []string{"run", "K", "sh", "-c", "exit 3", "-n"}, 3, ""},
		{"-c", []string{"run", "-c", "exit 5", "K"}, 5, ""},
		{"child killed by signal", []string{"run", "K", "--", "sh", "-c", "kill -KILL $$"}, 128 + 9, ""},
		{"child killed by SIGTERM", []string{"run", "K", "--", "sh", "-c", "kill -TERM $$"}, 128 + 15, ""},
		{"not found", []string{"run", "K", "--", "no-such-command-dlock-test"}, 127, "command not found"},
		{"not found by path", []string{"run", "K", "--", filepath.Join(dir, "missing")}, 127, "command not found"},
		{"not executable", []string{"run", "K", "--", notExec}, 126, "not executable"},
		{"a directory", []string{"run", "K", "--", dir}, 126, ""},
		{"exec format error", []string{"run", "K", "--", noShebang}, 126, "cannot execute"},
		{"no key", []string{"run"}, 2, "missing KEY"},
		{"no command", []string{"run", "K"}, 2, "missing COMMAND"},
		{"-c and command", []string{"run", "-c", "true", "K", "true"}, 2, "either -c"},
		{"unknown flag", []string{"run", "--bogus", "K", "true"}, 2, "bogus"},
		{"-n with -w", []string{"run", "-n", "-w", "1s", "K", "true"}, 2, "exclude"},
		{"-E out of range", []string{"run", "-E", "300", "K", "true"}, 2, "0..255"},
		{"bad duration", []string{"run", "-w", "soon", "K", "true"}, 2, "invalid duration"},
		{"shared and limit", []string{"run", "-s", "--limit", "3", "K", "true"}, 2, "exclude each other"},
		{"negative limit", []string{"run", "--limit", "-1", "K", "true"}, 2, "at least 1"},
		{"shared legacy", []string{"run", "-s", "--protocol", "legacy", "K", "true"}, 2, "token protocol"},
		{"bad protocol", []string{"run", "--protocol", "redlock", "K", "true"}, 2, "token or legacy"},
		{"bad legacy unit", []string{"run", "--protocol", "legacy", "--legacy-unit", "h", "K", "true"}, 2, "s or ms"},
		{"no command at all", []string{}, 2, ""},
		{"unknown command", []string{"frobnicate"}, 2, "unknown command"},
		{"help", []string{"help", "run"}, 0, ""},
		{"-h", []string{"run", "-h"}, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := tc.args
			for i, a := range args {
				if a == "K" {
					args = append([]string(nil), args...)
					args[i] = testKey(t)
				}
			}
			r := dlockRun(t, nil, onSrv(args...)...)
			expectCode(t, r, tc.code)
			expectStderr(t, r, tc.stderr)
		})
	}
}

func TestHelpDocumentsExitCodes(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"help"}, {"run", "--help"}} {
		r := dlockRun(t, nil, args...)
		expectCode(t, r, 0)
		for _, code := range []string{"124", "125", "126", "127", "128+N", "-E"} {
			if !strings.Contains(r.stdout, code) {
				t.Errorf("dlock %v: help does not mention %s", args, code)
			}
		}
	}
}

func TestRunNotAcquired(t *testing.T) {
	t.Parallel()
	key := testKey(t)
	marker := filepath.Join(t.TempDir(), "ran")
	touch := []string{"--", "touch", marker}
	lk := hold(t, key)

	// The five attempts are independent: they run side by side.
	var ps []*proc
	for _, args := range [][]string{{"-n"}, {"--no-wait", "-E", "9"}, {"-n", "-q"}, {"-w", "0"}, {"-w", "400ms", "-E", "3"}} {
		args = append(append([]string{"run"}, args...), key)
		ps = append(ps, startDlock(t, nil, onSrv(append(args, touch...)...)...))
	}
	r := ps[0].wait(60 * time.Second)
	expectCode(t, r, 1)
	expectStderr(t, r, "held by another owner")

	r = ps[1].wait(60 * time.Second)
	expectCode(t, r, 9)

	r = ps[2].wait(60 * time.Second)
	expectCode(t, r, 1)
	if r.stderr != "" {
		t.Errorf("-q printed %q", r.stderr)
	}

	r = ps[3].wait(60 * time.Second)
	expectCode(t, r, 1)

	r = ps[4].wait(60 * time.Second)
	expectCode(t, r, 3)
	expectStderr(t, r, "still held after waiting 400ms")
	if r.elapsed < 400*time.Millisecond {
		t.Errorf("-w 400ms gave up after %v", r.elapsed)
	}
	if fileExists(marker) {
		t.Fatal("the command ran although the lock was not acquired")
	}

	// -w succeeds when the holder lets go in time; plain run waits as long as it takes.
	p1 := startDlock(t, nil, onSrv(append([]string{"run", "-w", "20s", key}, touch...)...)...)
	p2 := startDlock(t, nil, onSrv("run", key, "true")...)
	time.Sleep(500 * time.Millisecond)
	if err := lk.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	expectCode(t, p1.wait(20*time.Second), 0)
	expectCode(t, p2.wait(20*time.Second), 0)
	if !fileExists(marker) {
		t.Fatal("the command did not run")
	}
}

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`)

func TestRunEnvironment(t *testing.T) {
	t.Parallel()
	key := testKey(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "env")
	gate := filepath.Join(dir, "gate")
	script := fmt.Sprintf(`printf '%%s\n%%s\n%%s\n' "$DLOCK_KEY" "$DLOCK_TOKEN" "$DLOCK_FENCE" > %[1]s.tmp
env | grep -c '^DLOCK_KEY=' >> %[1]s.tmp
printf '%%s\n' "$INHERITED" >> %[1]s.tmp
mv %[1]s.tmp %[1]s
while [ ! -e %[2]s ]; do sleep 0.02; done`, out, gate)
	// A nested dlock run inherits its parent's DLOCK_* values: ours must win.
	env := []string{"DLOCK_KEY=outer-key", "DLOCK_TOKEN=outer-token", "DLOCK_FENCE=1", "INHERITED=yes"}
	p := startDlock(t, env, onSrv("run", key, "--", "sh", "-c", script)...)
	waitFor(t, 10*time.Second, "the command's environment dump", func() bool { return fileExists(out) })
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 5 {
		t.Fatalf("env dump: %q", data)
	}
	gotKey, gotToken, gotFence := lines[0], lines[1], lines[2]
	if gotKey != key {
		t.Errorf("DLOCK_KEY = %q, want %q", gotKey, key)
	}
	if !tokenRE.MatchString(gotToken) {
		t.Errorf("DLOCK_TOKEN = %q, want a dlock token", gotToken)
	}
	fence, err := strconv.ParseUint(gotFence, 10, 64)
	if err != nil || fence == 0 {
		t.Errorf("DLOCK_FENCE = %q, want a positive number", gotFence)
	}
	if lines[3] != "1" {
		t.Errorf("the command sees %s DLOCK_KEY variables, want 1", lines[3])
	}
	if lines[4] != "yes" {
		t.Errorf("inherited variable lost: %q", lines[4])
	}
	// The token and fence are the ones Redis holds for the lock.
	_, rdb := lib(t)
	adm := adminOn(t, rdb)
	info, err := adm.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Value != gotToken || info.Fence != fence {
		t.Errorf("Redis has %+v; the command got token %s fence %d", info, gotToken, fence)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	expectCode(t, p.wait(10*time.Second), 0)
	// Released on exit.
	info, err = adm.Inspect(context.Background(), key)
	if err != nil || info.Held {
		t.Errorf("after the command: %+v, %v", info, err)
	}
}

func TestRunForwardsSignals(t *testing.T) {
	t.Parallel()
	for i, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP,
		syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2} {
		name := strings.TrimPrefix(signalName(sig), "SIG")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if signal.Ignored(sig) {
				// dlock inherits the disposition and, by design, passes
				// on no signal it was started with ignored (nohup).
				t.Skipf("the tests were started with %s ignored (nohup?)", signalName(sig))
			}
			dir := t.TempDir()
			got, ready := filepath.Join(dir, "got"), filepath.Join(dir, "ready")
			code := 40 + i
			script := fmt.Sprintf(`trap 'echo %s > %s; exit %d' %s
touch %s
while :; do sleep 0.02; done`, name, got, code, name, ready)
			p := startDlock(t, nil, onSrv("run", testKey(t), "--", "sh", "-c", script)...)
			waitFor(t, 30*time.Second, "the command to start", func() bool { return fileExists(ready) })
			p.signal(sig)
			r := p.wait(30 * time.Second)
			expectCode(t, r, code)
			data, _ := os.ReadFile(got)
			if strings.TrimSpace(string(data)) != name {
				t.Errorf("the command's trap recorded %q, want %s", data, name)
			}
		})
	}
	t.Run("untrapped TERM", func(t *testing.T) {
		t.Parallel()
		ready := filepath.Join(t.TempDir(), "ready")
		p := startDlock(t, nil, onSrv("run", testKey(t), "--", "sh", "-c",
			"touch "+ready+"; while :; do sleep 0.02; done")...)
		waitFor(t, 30*time.Second, "the command to start", func() bool { return fileExists(ready) })
		p.signal(syscall.SIGTERM)
		expectCode(t, p.wait(30*time.Second), 128+15)
	})
}

func signalName(s syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM",
		syscall.SIGHUP: "SIGHUP", syscall.SIGQUIT: "SIGQUIT", syscall.SIGUSR1: "SIGUSR1",
		syscall.SIGUSR2: "SIGUSR2"}[s]
}

func TestRunSignalWhileWaiting(t *testing.T) {
	t.Parallel()
	key := testKey(t)
	hold(t, key)
	marker := filepath.Join(t.TempDir(), "ran")
	p := startDlock(t, nil, onSrv("run", key, "--", "touch", marker)...)
	_, rdb := lib(t)
	adm := adminOn(t, rdb)
	waitFor(t, 30*time.Second, "dlock to queue for the lock", func() bool {
		info, err := adm.Inspect(context.Background(), key)
		return err == nil && info.Queued > 0
	})
	p.signal(syscall.SIGTERM)
	r := p.wait(10 * time.Second)
	expectCode(t, r, 128+15)
	expectStderr(t, r, "while waiting")
	if fileExists(marker) {
		t.Fatal("the command ran")
	}
}

// pidAlive reports whether a process with this pid exists.
func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func readPid(t testing.TB, path string) int {
	t.Helper()
	var pid int
	waitFor(t, 10*time.Second, "the command's pid file", func() bool {
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	return pid
}

func TestRunLostLock(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	t.Run("SIGTERM", func(t *testing.T) {
		t.Parallel()
		key := testKey(t)
		pidFile := filepath.Join(t.TempDir(), "pid")
		// exec: the pid is sleep's, the process dlock started.
		p := startDlock(t, nil, onSrv("run", "--ttl", "1s", key, "--", "sh", "-c",
			"echo $$ > "+pidFile+".tmp; mv "+pidFile+".tmp "+pidFile+"; exec sleep 30")...)
		pid := readPid(t, pidFile)
		deleted := time.Now()
		if n, err := rdb.Del(context.Background(), key).Result(); err != nil || n != 1 {
			t.Fatalf("DEL %s: %d, %v", key, n, err)
		}
		r := p.wait(10 * time.Second)
		after := time.Since(deleted)
		expectCode(t, r, 124)
		expectStderr(t, r, "lost the lock", "the key was deleted", "SIGTERM")
		// The renewal interval is TTL/3 = 333ms: loss is seen at the next one.
		if after > 1500*time.Millisecond {
			t.Errorf("exit 124 came %v after the DEL; want about one renewal interval (333ms)", after)
		}
		if pidAlive(pid) {
			t.Errorf("the command (pid %d) still runs", pid)
		}
	})
	t.Run("SIGKILL after --kill-after", func(t *testing.T) {
		t.Parallel()
		key := testKey(t)
		pidFile := filepath.Join(t.TempDir(), "pid")
		p := startDlock(t, nil, onSrv("run", "--ttl", "1s", "--kill-after", "500ms", key, "--", "sh", "-c",
			"trap '' TERM; echo $$ > "+pidFile+".tmp; mv "+pidFile+".tmp "+pidFile+"; while :; do sleep 0.02; done")...)
		pid := readPid(t, pidFile)
		deleted := time.Now()
		if err := rdb.Del(context.Background(), key).Err(); err != nil {
			t.Fatal(err)
		}
		r := p.wait(10 * time.Second)
		after := time.Since(deleted)
		expectCode(t, r, 124)
		expectStderr(t, r, "lost the lock", "SIGKILL")
		if after < 500*time.Millisecond || after > 2500*time.Millisecond {
			t.Errorf("exit 124 came %v after the DEL; want renewal (≤333ms) + kill-after (500ms)", after)
		}
		if pidAlive(pid) {
			t.Errorf("the command (pid %d) still runs", pid)
		}
	})
	t.Run("Redis unreachable", func(t *testing.T) {
		t.Parallel()
		own := redistest.Start(t, redistest.Config{})
		ready := filepath.Join(t.TempDir(), "ready")
		p := startDlock(t, nil, "--redis", own.URL(), "run", "--ttl", "1s", testKey(t), "--", "sh", "-c",
			"touch "+ready+"; exec sleep 30")
		waitFor(t, 10*time.Second, "the command to start", func() bool { return fileExists(ready) })
		if err := own.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = own.Resume() })
		paused := time.Now()
		r := p.wait(15 * time.Second)
		expectCode(t, r, 124)
		// The command is stopped before the deadline (renewals failing),
		// or at the loss if dlock saw that first. The cause of a loss is
		// ErrUnreachable if a renewal failed before the deadline,
		// ErrExpired if it was still waiting for Redis then.
		if !strings.Contains(r.stderr, "lost the lock") && !strings.Contains(r.stderr, "renewals of") {
			t.Errorf("neither a loss nor failing renewals reported:\n%v", r)
		}
		if !strings.Contains(r.stderr, "SIGTERM") {
			t.Errorf("no SIGTERM reported:\n%v", r)
		}
		// Lost at the deadline (TTL minus drift after the last renewal),
		// then a bounded attempt to release.
		if d := time.Since(paused); d > 10*time.Second {
			t.Errorf("took %v", d)
		}
	})
	t.Run("taken by another owner", func(t *testing.T) {
		t.Parallel()
		key := testKey(t)
		ready := filepath.Join(t.TempDir(), "ready")
		p := startDlock(t, nil, onSrv("run", "--ttl", "1s", key, "--", "sh", "-c",
			"touch "+ready+"; exec sleep 30")...)
		waitFor(t, 10*time.Second, "the command to start", func() bool { return fileExists(ready) })
		if err := rdb.Set(context.Background(), key, "someone-else", 0).Err(); err != nil {
			t.Fatal(err)
		}
		r := p.wait(10 * time.Second)
		expectCode(t, r, 124)
		expectStderr(t, r, "another owner holds it now")
		if v, _ := rdb.Get(context.Background(), key).Result(); v != "someone-else" {
			t.Errorf("dlock touched the new owner's key: %q", v)
		}
	})
}

// TestRunExcludes runs four streams of `dlock run` on one key, 10 each,
// whose commands do an unprotected read-modify-write of a file: with the
// lock, no update is lost. The read and the write are 200ms apart, so
// that without exclusion runs of different streams overlap often (the
// same streams each on a key of its own lost 17 of the 40 updates on a
// loaded machine). The runs are few: each holds the lock while it starts
// a race-enabled guard binary, so the locked runs take turns for seconds.
func TestRunExcludes(t *testing.T) {
	t.Parallel()
	key := testKey(t)
	counter := filepath.Join(t.TempDir(), "counter")
	if err := os.WriteFile(counter, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The sleep widens the window between read and write.
	script := fmt.Sprintf(`n=$(cat %[1]s); sleep 0.2; echo $((n+1)) > %[1]s`, counter)
	const streams, perStream = 4, 10
	var wg sync.WaitGroup
	errs := make(chan string, streams*perStream)
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perStream {
				r := dlockRun(t, nil, onSrv("run", key, "--", "sh", "-c", script)...)
				if r.code != 0 {
					errs <- r.String()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	data, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(data)); got != strconv.Itoa(streams*perStream) {
		t.Fatalf("counter = %s after %d locked increments: %s lost", got, streams*perStream, lostCount(got, streams*perStream))
	}
}

func lostCount(got string, want int) string {
	n, err := strconv.Atoi(got)
	if err != nil {
		return "?"
	}
	return strconv.Itoa(want - n)
}

func TestRunLegacyProtocol(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	for _, tc := range []struct {
		unit   string
		digits int
		now    func() int64
		scale  int64
	}{
		{"s", 10, func() int64 { return time.Now().Unix() }, 1},
		{"ms", 13, func() int64 { return time.Now().UnixMilli() }, 1000},
	} {
		t.Run(tc.unit, func(t *testing.T) {
			t.Parallel()
			key := testKey(t)
			dir := t.TempDir()
			ready, gate := filepath.Join(dir, "ready"), filepath.Join(dir, "gate")
			p := startDlock(t, nil, onSrv("run", "--protocol", "legacy", "--legacy-unit", tc.unit, "--ttl", "5s", key,
				"--", "sh", "-c", "touch "+ready+"; while [ ! -e "+gate+" ]; do sleep 0.02; done")...)
			waitFor(t, 10*time.Second, "the command to start", func() bool { return fileExists(ready) })
			v, err := rdb.Get(context.Background(), key).Result()
			if err != nil {
				t.Fatal(err)
			}
			stamp, err := strconv.ParseInt(v, 10, 64)
			if err != nil || len(v) != tc.digits {
				t.Fatalf("legacy lock value %q: want a %d-digit Unix timestamp", v, tc.digits)
			}
			// now + timeout (5s) + 1 unit, renewed every TTL/3 (1.7s):
			// between 3.3s and 6s ahead, give or take a little.
			if d := stamp - tc.now(); d < 3*tc.scale || d > 7*tc.scale {
				t.Errorf("legacy timestamp %d is %d units from now; want about 5s ahead", stamp, d)
			}
			if ttl := rdb.PTTL(context.Background(), key).Val(); ttl != -1 {
				t.Errorf("legacy key has a Redis TTL %v; the protocol sets none", ttl)
			}
			st := dlockRun(t, nil, onSrv("status", "--json", key)...)
			expectCode(t, st, 0)
			if !strings.Contains(st.stdout, `"kind": "legacy"`) || !strings.Contains(st.stdout, `"legacy_unit": "`+tc.unit+`"`) {
				t.Errorf("status of a legacy lock:\n%v", st)
			}
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			expectCode(t, p.wait(10*time.Second), 0)
			if err := rdb.Get(context.Background(), key).Err(); !errors.Is(err, redis.Nil) {
				t.Errorf("legacy lock not released: %v", err)
			}
		})
	}
	t.Run("token holder", func(t *testing.T) {
		t.Parallel()
		key := testKey(t)
		hold(t, key)
		r := dlockRun(t, nil, onSrv("run", "--protocol", "legacy", key, "true")...)
		expectCode(t, r, 125)
		expectStderr(t, r, "not a decimal Unix timestamp")
	})
}
