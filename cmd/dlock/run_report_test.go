package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestRunFlagsAfterKey: flags between KEY and COMMAND are dlock's, as in
// the help's example; flags after COMMAND, and anything after "--", are
// COMMAND's.
func TestRunFlagsAfterKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"the help's example", []string{"run", "-w", "30s", "--ttl", "1m", "K", "-c", "exit 4"}, 4, ""},
		{"-n after KEY", []string{"run", "K", "-n", "--ttl", "5s", "sh", "-c", "exit 5"}, 5, ""},
		{"-- then a command named like a flag", []string{"run", "K", "--", "-c", "exit 6"}, 127, "-c: command not found"},
		{"-- before KEY ends dlock's flags", []string{"run", "--", "K", "-c", "exit 7"}, 127, "-c: command not found"},
		{"unknown flag after KEY", []string{"run", "K", "--bogus", "true"}, 2, "put -- before a COMMAND"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string(nil), tc.args...)
			for i, a := range args {
				if a == "K" {
					args[i] = testKey(t)
				}
			}
			r := dlockRun(t, nil, onSrv(args...)...)
			expectCode(t, r, tc.code)
			expectStderr(t, r, tc.stderr)
		})
	}
}

// TestRunDurationLimits: non-finite, overflowing and out-of-range
// durations are usage errors that name the value and the limit.
func TestRunDurationLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		stderr []string
	}{
		{[]string{"-w", "inf"}, []string{`"inf"`, "not a finite number"}},
		{[]string{"-w", "NaN"}, []string{`"NaN"`, "not a finite number"}},
		{[]string{"--kill-after", "NaN"}, []string{`"NaN"`, "not a finite number"}},
		{[]string{"--ttl", "+Inf"}, []string{`"+Inf"`, "not a finite number"}},
		{[]string{"-w", "1e300"}, []string{`"1e300"`, "out of range", "at most 2562047h"}},
		{[]string{"-w", "9999999999h"}, []string{`"9999999999h"`, "out of range", "at most 2562047h"}},
		{[]string{"--ttl", "1000000h"}, []string{"1000000h", "at most " + dlock.MaxTTL.String()}},
		{[]string{"--ttl", "10s", "--kill-after", "10s"}, []string{"--kill-after 10s", "at most TTL/2 (5s)"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			marker := filepath.Join(t.TempDir(), "ran")
			args := append(append([]string{"run"}, tc.args...), testKey(t), "touch", marker)
			r := dlockRun(t, nil, onSrv(args...)...)
			expectCode(t, r, 2)
			expectStderr(t, r, tc.stderr...)
			if fileExists(marker) {
				t.Error("the command ran")
			}
		})
	}
}

// TestRunSkipQuietlyExample: the "skip quietly" example of the help and of
// README.md says nothing when the lock is held, and exits 0.
func TestRunSkipQuietlyExample(t *testing.T) {
	t.Parallel()
	help := dlockRun(t, nil, "run", "--help")
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []struct{ name, text string }{{"run --help", help.stdout}, {"README.md", string(readme)}} {
		var line string
		for l := range strings.Lines(doc.text) {
			if strings.Contains(l, "skip quietly") {
				line = l
			}
		}
		if line == "" {
			t.Fatalf("%s has no \"skip quietly\" example", doc.name)
		}
		// dlock run FLAGS KEY -- COMMAND  # comment
		cmdline, _, _ := strings.Cut(line, "#")
		fields := strings.Fields(cmdline)
		if len(fields) < 3 || fields[0] != "dlock" || fields[1] != "run" {
			t.Fatalf("%s: not a dlock run line: %q", doc.name, line)
		}
		var flags []string
		for _, f := range fields[2:] {
			if !strings.HasPrefix(f, "-") && (len(flags) == 0 || flags[len(flags)-1] != "-E") {
				break // KEY
			}
			flags = append(flags, f)
		}
		key := testKey(t)
		hold(t, key)
		marker := filepath.Join(t.TempDir(), "ran")
		args := append(append([]string{"run"}, flags...), key, "--", "touch", marker)
		r := dlockRun(t, nil, onSrv(args...)...)
		expectCode(t, r, 0)
		if r.stderr != "" {
			t.Errorf("%s example %q wrote to stderr (cron mails it):\n%v", doc.name, strings.TrimSpace(line), r)
		}
		if fileExists(marker) {
			t.Error("the command ran")
		}
	}
}

// TestRunRedisOutageWhileWaiting: when Redis stops answering while -w
// waits (a paused server: it accepts connections but answers nothing),
// dlock exits 125 saying that Redis at its address did not answer, not
// "still held" with -E's code, and says so with -q too.
func TestRunRedisOutageWhileWaiting(t *testing.T) {
	t.Parallel()
	own := redistest.Start(t, redistest.Config{})
	rdb := own.Client(t)
	c, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adm := adminOn(t, rdb)
	// Both runs, with and without -q, wait through the same outage.
	var procs []*proc
	for _, quiet := range []bool{false, true} {
		key := testKey(t)
		lk, err := c.TryLock(context.Background(), key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = lk.Unlock(context.Background()) }()
		args := []string{"--redis", own.URL(), "run", "-w", "4s", "-E", "0"}
		if quiet {
			args = append(args, "-q")
		}
		p := startDlock(t, nil, append(args, key, "true")...)
		procs = append(procs, p)
		waitFor(t, 20*time.Second, "dlock to queue for the lock", func() bool {
			info, err := adm.Inspect(context.Background(), key)
			return err == nil && info.Queued > 0
		})
	}
	if err := own.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Resume() })
	var results []result
	for _, p := range procs {
		results = append(results, p.wait(60*time.Second))
	}
	if err := own.Resume(); err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		expectCode(t, r, 125)
		expectStderr(t, r, "Redis at "+own.Addr(), "did not answer")
		if strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("want one line on stderr:\n%v", r)
		}
		if strings.Contains(r.stderr, "still held") {
			t.Errorf("an outage reported as a conflict:\n%v", r)
		}
	}
}

// TestPausedRedisAtStart: a Redis that accepts connections but answers
// nothing (a paused server) from the start is reported as a Redis that
// did not answer, with exit 125, before `run -w 1s` could wait: not as a
// held lock, nor only as a low-level timeout.
func TestPausedRedisAtStart(t *testing.T) {
	t.Parallel()
	own := redistest.Start(t, redistest.Config{})
	if err := own.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Resume() })
	marker := filepath.Join(t.TempDir(), "ran")
	for _, args := range [][]string{{"run", "-w", "1s", testKey(t), "touch", marker}, {"status", testKey(t)}} {
		r := dlockRun(t, nil, append([]string{"--redis", own.URL()}, args...)...)
		expectCode(t, r, 125)
		expectStderr(t, r, "Redis at "+own.Addr(), "did not answer", "PING")
		if strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, "still held") {
			t.Errorf("dlock %s: want one line saying Redis did not answer:\n%v", args[0], r)
		}
	}
	if fileExists(marker) {
		t.Error("the command ran")
	}
}

// TestRunInterruptWhileConnecting: Ctrl-C (SIGINT) or SIGTERM while dlock
// connects to a Redis that does not answer ends it with 128+N, not 125
// after the connection check gives up.
func TestRunInterruptWhileConnecting(t *testing.T) {
	t.Parallel()
	own := redistest.Start(t, redistest.Config{})
	if err := own.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Resume() })
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		marker := filepath.Join(t.TempDir(), "ran")
		p := startDlock(t, nil, "--redis", own.URL(), "run", testKey(t), "touch", marker)
		waitFor(t, 20*time.Second, "dlock to open its connection", func() bool { return hasSocket(p.cmd.Process.Pid) })
		p.signal(sig)
		r := p.wait(60 * time.Second)
		expectCode(t, r, 128+int(sig))
		expectStderr(t, r, "while connecting")
		if fileExists(marker) {
			t.Error("the command ran")
		}
	}
}

// hasSocket reports whether process pid has a socket open.
func hasSocket(pid int) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			return true
		}
	}
	return false
}

// TestRunLostMessageOneLine: the message about a lock lost to a Redis that
// stopped answering is one line that names one cause.
func TestRunLostMessageOneLine(t *testing.T) {
	t.Parallel()
	own := redistest.Start(t, redistest.Config{})
	ready := filepath.Join(t.TempDir(), "ready")
	p := startDlock(t, nil, "--redis", own.URL(), "run", "--ttl", "1s", testKey(t), "--", "sh", "-c",
		"touch "+ready+"; exec sleep 60")
	waitFor(t, 20*time.Second, "the command to start", func() bool { return fileExists(ready) })
	if err := own.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Resume() })
	r := p.wait(60 * time.Second)
	expectCode(t, r, 124)
	// The command may be stopped before the deadline (renewals failing)
	// or at the loss: either way, every message is one line, and none
	// repeats itself.
	for l := range strings.Lines(r.stderr) {
		if !strings.HasPrefix(l, "dlock: ") {
			t.Errorf("stderr line without the dlock: prefix (a message broken over lines?): %q\n%v", l, r)
		}
		if n := strings.Count(l, "lost"); n > 1 {
			t.Errorf("a message says \"lost\" %d times: %q", n, l)
		}
	}
	if !strings.Contains(r.stderr, "lost the lock") && !strings.Contains(r.stderr, "renewals of") {
		t.Errorf("no message about the lock:\n%v", r)
	}
}

// TestRunKeepsIgnoredSignals: under nohup (SIGHUP ignored) dlock leaves
// SIGHUP ignored for the command and does not forward it; likewise SIGINT,
// which a shell ignores for `cmd &` in a script.
func TestRunKeepsIgnoredSignals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{{"HUP", syscall.SIGHUP}, {"INT", syscall.SIGINT}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ignored, gate := filepath.Join(dir, "sigign"), filepath.Join(dir, "gate")
			script := "grep SigIgn /proc/$$/status > " + ignored + ".tmp; mv " + ignored + ".tmp " + ignored +
				"; while [ ! -e " + gate + " ]; do sleep 0.02; done"
			// The shell ignores the signal, then becomes dlock: dlock starts
			// with it ignored, as under nohup.
			p := startProc(t, "/bin/sh", nil, "-c", `trap "" `+tc.name+`; exec "$0" "$@"`, binPath,
				"--redis", srv.URL(), "run", testKey(t), "--", "sh", "-c", script)
			waitFor(t, 20*time.Second, "the command to start", func() bool { return fileExists(ignored) })
			data, err := os.ReadFile(ignored)
			if err != nil {
				t.Fatal(err)
			}
			mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(string(data), "SigIgn:")), 16, 64)
			if err != nil {
				t.Fatalf("SigIgn line %q: %v", data, err)
			}
			if mask&(1<<(tc.sig-1)) == 0 {
				t.Errorf("the command does not ignore SIG%s (SigIgn %#x)", tc.name, mask)
			}
			p.signal(tc.sig)                   // dlock itself: must neither forward it nor die of it
			time.Sleep(500 * time.Millisecond) // time to forward it, if dlock did
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			expectCode(t, p.wait(60*time.Second), 0)
		})
	}
}
