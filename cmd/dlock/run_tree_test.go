package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// processGone reports whether pid has exited (a zombie counts as exited).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

// keyOutlivesTree polls until key is gone from the server, failing the
// test if it goes while any of pids still runs (the command outlived its
// lock), or if it is still there 60s later (what: what happened to dlock,
// for the messages). It returns how long before the key's expiry the last
// of pids was gone.
func keyOutlivesTree(t *testing.T, rdb redis.UniversalClient, key string, pids []int, what string) time.Duration {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var treeGone time.Time
	for {
		exists, err := rdb.Exists(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, pid := range pids {
			if !processGone(pid) {
				running++
			}
		}
		if exists == 0 && running > 0 {
			t.Fatalf("the key expired on the server while %d of the command's processes still ran (%s)", running, what)
		}
		if running == 0 && treeGone.IsZero() {
			treeGone = time.Now()
		}
		if exists == 0 {
			return time.Since(treeGone)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key still exists, or the command's processes still run, 60s after %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// killAtCleanup SIGKILLs pid when the test ends, should it still run.
func killAtCleanup(t *testing.T, pid int) {
	t.Cleanup(func() {
		if !processGone(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// writePid is shell code that writes the shell's pid to file atomically.
func writePid(file string) string {
	return "echo $$ > " + file + ".tmp; mv " + file + ".tmp " + file
}

// TestRunLockCoversBackgroundJobs: a job the command starts in the
// background and leaves running holds the lock with it, as a descriptor
// inherited from flock(1) would; dlock exits and releases when it ends.
func TestRunLockCoversBackgroundJobs(t *testing.T) {
	t.Parallel()
	key := testKey(t)
	pidFile := filepath.Join(t.TempDir(), "bg")
	p := startDlock(t, nil, onSrv("run", key, "-c",
		"sh -c '"+writePid(pidFile)+"; exec sleep 60' >/dev/null 2>&1 & exit 3")...)
	bg := readPid(t, pidFile)
	killAtCleanup(t, bg)
	// The command has exited; its job runs on: the lock is held.
	r := dlockRun(t, nil, onSrv("run", "-n", key, "true")...)
	expectCode(t, r, 1)
	expectStderr(t, r, "held by another owner")
	if err := syscall.Kill(bg, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expectCode(t, p.wait(60*time.Second), 3) // the command's own status
	_, rdb := lib(t)
	if info, err := adminOn(t, rdb).Inspect(context.Background(), key); err != nil || info.Held {
		t.Errorf("after the last job ended: %+v, %v", info, err)
	}
}

// TestRunLostLockKillsTree: when the lock is lost, every process started
// under it is stopped before dlock exits: an inner shell loop, a background
// job, a double-forked daemon in a session of its own, even one that
// ignores SIGTERM.
func TestRunLostLockKillsTree(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	for _, tc := range []struct {
		name, script string // script gets INNER: the pid file to write
	}{
		{"inner sh -c loop", `sh -c 'WRITEPID; while :; do sleep 0.05; done'; echo after`},
		{"background job", `sh -c 'WRITEPID; exec sleep 60' & wait`},
		{"background job of an exited command", `sh -c 'WRITEPID; exec sleep 60' >/dev/null 2>&1 & while [ ! -e INNER ]; do sleep 0.02; done`},
		{"double-forked daemon", `(setsid sh -c 'WRITEPID; exec sleep 60' >/dev/null 2>&1 &); while [ ! -e INNER ]; do sleep 0.02; done`},
		{"ignores SIGTERM", `trap '' TERM; sh -c 'trap "" TERM; WRITEPID; while :; do sleep 0.05; done' & wait; wait`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := testKey(t)
			inner := filepath.Join(t.TempDir(), "inner")
			script := strings.ReplaceAll(strings.ReplaceAll(tc.script, "WRITEPID", writePid(inner)), "INNER", inner)
			p := startDlock(t, nil, onSrv("run", "--ttl", "2s", "--kill-after", "300ms", key, "-c", script)...)
			pid := readPid(t, inner)
			killAtCleanup(t, pid)
			if n, err := rdb.Del(context.Background(), key).Result(); err != nil || n != 1 {
				t.Fatalf("DEL %s: %d, %v (dlock: %v)", key, n, err, p.cmd.ProcessState)
			}
			r := p.wait(60 * time.Second)
			expectCode(t, r, 124)
			expectStderr(t, r, "lost the lock")
			if !processGone(pid) {
				t.Errorf("process %d, started under the lock, runs on after dlock exited:\n%v", pid, r)
			}
		})
	}
}

// TestRunKilledDlockKillsTree: if dlock is killed outright (SIGKILL),
// nobody renews the lock: its whole process tree dies with it, also
// processes that ignore SIGTERM.
func TestRunKilledDlockKillsTree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	outer, inner := filepath.Join(dir, "outer"), filepath.Join(dir, "inner")
	script := `trap '' TERM; ` + writePid(outer) + `; sh -c 'trap "" TERM; ` + writePid(inner) +
		`; while :; do sleep 0.05; done' & wait; wait`
	p := startDlock(t, nil, onSrv("run", testKey(t), "-c", script)...)
	pids := []int{readPid(t, outer), readPid(t, inner)}
	for _, pid := range pids {
		killAtCleanup(t, pid)
	}
	p.signal(syscall.SIGKILL)
	p.wait(60 * time.Second)
	for _, pid := range pids {
		waitFor(t, 30*time.Second, "process "+strconv.Itoa(pid)+" to die with dlock", func() bool { return processGone(pid) })
	}
}

// TestRunKilledDlockTermsTree: a dlock killed outright (SIGKILL) leaves
// the lock held until its deadline, renewed by nobody. Its tree gets
// SIGTERM at once, to clean up while the lock still covers it, and is gone
// before the key can expire on the server.
func TestRunKilledDlockTermsTree(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	key := testKey(t)
	dir := t.TempDir()
	pidFile, cleaned := filepath.Join(dir, "pid"), filepath.Join(dir, "cleaned")
	script := `trap 'echo done > ` + cleaned + `; exit 0' TERM; ` + writePid(pidFile) + `; while :; do sleep 0.05; done`
	p := startDlock(t, nil, onSrv("run", "--ttl", "3s", "--kill-after", "1s", key, "-c", script)...)
	pid := readPid(t, pidFile)
	killAtCleanup(t, pid)
	p.signal(syscall.SIGKILL)
	keyOutlivesTree(t, rdb, key, []int{pid}, "dlock was killed")
	r := p.wait(60 * time.Second)
	if !fileExists(cleaned) {
		t.Errorf("the command of a killed dlock got SIGKILL without SIGTERM first:\n%v", r)
	}
	expectStderr(t, r, "dlock is gone", "SIGTERM")
}

// TestRunGuardWithoutStderr: the guard's messages go to dlock's stderr.
// When its reader is gone (a log pipeline that ended with dlock), writing
// them must not kill the guard (SIGPIPE) before it stops the tree of a
// stopped or killed dlock.
func TestRunGuardWithoutStderr(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	for name, sig := range map[string]syscall.Signal{"SIGSTOP": syscall.SIGSTOP, "SIGKILL": syscall.SIGKILL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			key := testKey(t)
			pidFile := filepath.Join(t.TempDir(), "pid")
			script := `trap '' TERM; ` + writePid(pidFile) + `; while :; do sleep 0.05; done`
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			// A TTL of 10 s: the guard, itself a process on a loaded
			// machine, has seconds to act, and a guard killed by SIGPIPE
			// still leaves the tree running past the key's expiry.
			cmd := exec.Command(binPath, onSrv("run", "--ttl", "10s", "--kill-after", "1s", key, "-c", script)...)
			cmd.Env = baseEnv()
			cmd.Stdout, cmd.Stderr = w, w
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			_ = w.Close()
			exited := make(chan struct{})
			go func() {
				_ = cmd.Wait()
				close(exited)
			}()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
			})
			pid := readPid(t, pidFile)
			killAtCleanup(t, pid)
			_ = r.Close()
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			keyOutlivesTree(t, rdb, key, []int{pid}, "dlock got "+name+", its stderr without a reader")
		})
	}
}

// commOf is the process name of pid (/proc/PID/comm), "" if it is gone.
func commOf(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

// TestRunKillallDlock: `killall -9 dlock` (or `pkill -9 dlock`) SIGKILLs
// every process named dlock at once. The guard is not among them: it stops
// the tree, also processes that ignore SIGTERM, before the key can expire
// on the server.
func TestRunKillallDlock(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	key := testKey(t)
	dir := t.TempDir()
	outer, inner := filepath.Join(dir, "outer"), filepath.Join(dir, "inner")
	script := `trap '' TERM; ` + writePid(outer) + `; sh -c 'trap "" TERM; ` + writePid(inner) +
		`; while :; do sleep 0.05; done' & wait; wait`
	p := startDlock(t, nil, onSrv("run", "--ttl", "3s", "--kill-after", "1s", key, "-c", script)...)
	pids := []int{readPid(t, outer), readPid(t, inner)}
	for _, pid := range pids {
		killAtCleanup(t, pid)
	}
	// killall, limited to this test's dlock and its descendants: other
	// dlocks may run on this machine.
	self := p.cmd.Process.Pid
	name := commOf(self)
	if name == "" {
		t.Fatalf("dlock is gone:\n%v", p.wait(60*time.Second))
	}
	var victims []int
	for _, pid := range append([]int{self}, descendants(self)...) {
		if commOf(pid) == name {
			victims = append(victims, pid)
		}
	}
	// At once: stopped first, none of them can act on the death of
	// another (dlock kills the guard's orphans, the guard dlock's tree)
	// before its own SIGKILL, however slowly this test runs.
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
		for _, pid := range victims {
			_ = syscall.Kill(pid, sig)
		}
	}
	t.Logf("SIGKILLed %d processes named %q", len(victims), name)
	keyOutlivesTree(t, rdb, key, pids, "SIGKILL to every process named "+name)
	p.wait(60 * time.Second)
}

// TestRunGuardName: the guard's process name is not dlock's, nor contains
// it: `killall dlock` and `pkill dlock` do not reach it.
func TestRunGuardName(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	p := startDlock(t, nil, onSrv("run", testKey(t), "-c", writePid(pidFile)+"; exec sleep 60")...)
	pid := readPid(t, pidFile)
	killAtCleanup(t, pid)
	guard, _, ok := procStat(pid)
	if !ok {
		t.Fatal("cannot read the command's parent")
	}
	if name := commOf(guard); name != guardName {
		t.Errorf("the guard's process name is %q, want %q", name, guardName)
	}
	if cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(guard) + "/cmdline"); err != nil || !strings.HasPrefix(string(cmdline), guardName+"\x00") {
		t.Errorf("the guard's command line is %q (%v), want it to start with %q", cmdline, err, guardName)
	}
	// Every thread's name, for ps -L and top -H.
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(guard) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(guard) + "/task/" + e.Name() + "/comm")
		if err == nil && strings.Contains(string(data), "dlock") {
			t.Errorf("thread %s of the guard is named %q", e.Name(), strings.TrimSpace(string(data)))
		}
	}
	p.signal(syscall.SIGTERM)
	expectCode(t, p.wait(60*time.Second), 128+15)
}

// TestRunStopsTreeBeforeExpiry: when renewals fail (Redis unreachable),
// the command's tree gets SIGTERM --kill-after before the lock's deadline,
// and is gone before the key expires on the server: at no moment is the
// key gone while the command still runs.
func TestRunStopsTreeBeforeExpiry(t *testing.T) {
	t.Parallel()
	own := redistest.Start(t, redistest.Config{})
	proxy := redistest.NewProxy(t, own.Addr())
	rdb := own.Client(t)
	key := testKey(t)
	dir := t.TempDir()
	outer, inner := filepath.Join(dir, "outer"), filepath.Join(dir, "inner")
	// Both take 300ms to exit after SIGTERM: long enough to outlive the
	// key if SIGTERM came only at the deadline.
	script := `trap 'sleep 0.3; exit 0' TERM; ` + writePid(outer) + `; sh -c "trap 'sleep 0.3; exit 0' TERM; ` +
		writePid(inner) + `; while :; do sleep 0.02; done" & while :; do sleep 0.02; done`
	p := startDlock(t, nil, "--redis", "redis://"+proxy.Addr(), "run", "--ttl", "3s", "--kill-after", "1s", key, "-c", script)
	pids := []int{readPid(t, outer), readPid(t, inner)}
	for _, pid := range pids {
		killAtCleanup(t, pid)
	}
	proxy.Blackhole(true)
	before := keyOutlivesTree(t, rdb, key, pids, "Redis became unreachable")
	t.Logf("the tree was gone %v before the key expired on the server", before.Round(time.Millisecond))
	r := p.wait(60 * time.Second)
	expectCode(t, r, 124)
	expectStderr(t, r, "renewals of", "SIGTERM")
}

// TestRunTerminal: with a terminal, COMMAND runs in a process group of
// its own that is the terminal's foreground group (Ctrl-C and job control
// reach it), and dlock gives the terminal back to its own group after.
func TestRunTerminal(t *testing.T) {
	t.Parallel()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("needs script(1) for a pseudo-terminal")
	}
	dir := t.TempDir()
	during, after := filepath.Join(dir, "during"), filepath.Join(dir, "after")
	inner := `ps -o pid=,pgid=,tpgid= -p $$ > ` + during
	shell := `"$DLOCK_BIN" --redis "$REDIS" run "$KEY" -- sh -c "$INNER"; echo $? > ` + after +
		`.code; ps -o pid=,pgid=,tpgid= -p $$ > ` + after
	p := startProc(t, script, []string{"DLOCK_BIN=" + binPath, "REDIS=" + srv.URL(), "KEY=" + testKey(t), "INNER=" + inner},
		"-qec", shell, "/dev/null")
	r := p.wait(60 * time.Second)
	expectCode(t, r, 0)
	fields := func(file string) []string {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%v\n%v", err, r)
		}
		return strings.Fields(string(data))
	}
	if code := fields(after + ".code"); len(code) != 1 || code[0] != "0" {
		t.Fatalf("dlock exited %v:\n%v", code, r)
	}
	// pid pgid tpgid
	if d := fields(during); len(d) != 3 || d[0] != d[1] || d[1] != d[2] {
		t.Errorf("COMMAND's pid, pgid, terminal foreground group = %v: want its own group, in the foreground", d)
	}
	if a := fields(after); len(a) != 3 || a[1] != a[2] {
		t.Errorf("after dlock: the shell's pid, pgid, terminal foreground group = %v: the terminal was not given back", a)
	}
}

// processStopped reports whether pid is stopped (state T in /proc).
func processStopped(pid int) bool {
	_, state, ok := procStat(pid)
	return ok && state == 'T'
}

// TestRunLostLockContinuesStoppedTree: a process under the lock that is
// stopped (SIGSTOP) when the lock is lost is continued after SIGTERM, so
// that it acts on it (here, a trap that cleans up and exits) instead of
// sitting stopped until SIGKILL --kill-after later.
func TestRunLostLockContinuesStoppedTree(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	key := testKey(t)
	dir := t.TempDir()
	pidFile, cleaned := filepath.Join(dir, "pid"), filepath.Join(dir, "cleaned")
	script := `trap 'echo done > ` + cleaned + `; exit 0' TERM; ` + writePid(pidFile) +
		`; kill -STOP $$; while :; do sleep 0.05; done`
	// Renewals every 4s see the loss; SIGKILL comes 6s after SIGTERM.
	p := startDlock(t, nil, onSrv("run", "--ttl", "12s", "--kill-after", "6s", key, "-c", script)...)
	pid := readPid(t, pidFile)
	killAtCleanup(t, pid)
	waitFor(t, 30*time.Second, "the command to stop itself", func() bool { return processStopped(pid) })
	if n, err := rdb.Del(context.Background(), key).Result(); err != nil || n != 1 {
		t.Fatalf("DEL %s: %d, %v", key, n, err)
	}
	r := p.wait(60 * time.Second)
	expectCode(t, r, 124)
	expectStderr(t, r, "lost the lock")
	if !fileExists(cleaned) {
		t.Errorf("the stopped command never acted on SIGTERM (killed by SIGKILL instead):\n%v", r)
	}
}

// TestRunTerminalSuspend: Ctrl-Z stops COMMAND's group, the terminal's
// foreground, but not dlock, which holds the lock: the shell would never
// see its job stop and get the terminal back, and Ctrl-C would reach only
// the stopped group. COMMAND is resumed instead, with a message, and runs
// to its end.
func TestRunTerminalSuspend(t *testing.T) {
	t.Parallel()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("needs script(1) for a pseudo-terminal")
	}
	dir := t.TempDir()
	pidFile, resumed, code := filepath.Join(dir, "pid"), filepath.Join(dir, "resumed"), filepath.Join(dir, "code")
	// The SIGTSTP of Ctrl-Z, sent by COMMAND to itself.
	inner := writePid(pidFile) + `; kill -TSTP $$; echo resumed > ` + resumed
	shell := `"$DLOCK_BIN" --redis "$REDIS" run "$KEY" -- sh -c "$INNER"; echo $? > ` + code
	p := startProc(t, script, []string{"DLOCK_BIN=" + binPath, "REDIS=" + srv.URL(), "KEY=" + testKey(t), "INNER=" + inner},
		"-qec", shell, "/dev/null")
	pid := readPid(t, pidFile)
	killAtCleanup(t, pid)
	waitFor(t, 30*time.Second, "the suspended command to go on", func() bool { return fileExists(resumed) })
	r := p.wait(60 * time.Second)
	expectCode(t, r, 0)
	if data, err := os.ReadFile(code); err != nil || strings.TrimSpace(string(data)) != "0" {
		t.Errorf("dlock exited %q (%v), want 0:\n%v", data, err, r)
	}
	if !strings.Contains(r.stdout, "cannot be suspended") {
		t.Errorf("no message on the terminal:\n%v", r)
	}
}

// TestRunSIGTSTP: SIGTSTP to dlock (Ctrl-Z after `fg` on a dlock started
// with '&'; COMMAND's tree is in groups of its own and goes on) does not
// stop dlock: a stopped dlock renews nothing, and the lock would expire
// while the command still ran.
func TestRunSIGTSTP(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	key := testKey(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	// A group of its own, whose parent (this test) is in another group of
	// the same session: not an orphaned group, where the kernel would
	// discard SIGTSTP.
	p := startProcAttr(t, &syscall.SysProcAttr{Setpgid: true}, binPath, nil,
		onSrv("run", "--ttl", "3s", key, "-c", writePid(pidFile)+"; while :; do sleep 0.05; done")...)
	pid := readPid(t, pidFile)
	killAtCleanup(t, pid)
	p.signal(syscall.SIGTSTP)
	// Longer than the TTL: a stopped dlock lets the key expire meanwhile.
	end := time.Now().Add(5 * time.Second)
	for time.Now().Before(end) {
		if processStopped(p.cmd.Process.Pid) {
			t.Fatal("SIGTSTP stopped dlock while the command ran: nobody renews the lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if info, err := adminOn(t, rdb).Inspect(context.Background(), key); err != nil || !info.Held {
		t.Fatalf("the lock is not held while the command runs: %+v, %v", info, err)
	}
	if processGone(pid) {
		t.Fatal("the command is gone")
	}
	p.signal(syscall.SIGTERM) // passed on: the command dies of it
	r := p.wait(60 * time.Second)
	expectCode(t, r, 128+15)
	expectStderr(t, r, "got SIGTSTP: not stopping")
}

// TestRunStoppedDlockStopsTree: a dlock stopped while the command runs
// (SIGSTOP; a hang would be the same) renews nothing, and the lock expires:
// its guard stops the tree by the last deadline dlock gave it, so that the
// key never expires while the command still runs.
func TestRunStoppedDlockStopsTree(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	key := testKey(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	// SIGTERM from the guard 1s (half of --kill-after) before the deadline.
	p := startDlock(t, nil, onSrv("run", "--ttl", "4s", "--kill-after", "2s", key, "-c",
		writePid(pidFile)+"; while :; do sleep 0.05; done")...)
	pid := readPid(t, pidFile)
	killAtCleanup(t, pid)
	p.signal(syscall.SIGSTOP)
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })
	keyOutlivesTree(t, rdb, key, []int{pid}, "dlock was stopped")
	p.signal(syscall.SIGCONT)
	r := p.wait(60 * time.Second)
	expectCode(t, r, 124)
	expectStderr(t, r, "has given no later one")
}

// TestRunPausedGuardKeepsHealthyTree: a guard that was paused for a while
// (a starved machine; a guard slow to start) finds the deadlines dlock sent
// meanwhile queued in its pipe, the first ones past. It acts on the latest,
// and does not stop the tree of a lock that dlock renewed all along.
func TestRunPausedGuardKeepsHealthyTree(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	key := testKey(t)
	dir := t.TempDir()
	pidFile, gate := filepath.Join(dir, "pid"), filepath.Join(dir, "gate")
	p := startDlock(t, nil, onSrv("run", "--ttl", "1s", key, "-c",
		writePid(pidFile)+"; while [ ! -e "+gate+" ]; do sleep 0.02; done")...)
	pid := readPid(t, pidFile)
	killAtCleanup(t, pid)
	ppid, _, ok := procStat(pid) // the command's parent: the guard
	if !ok {
		t.Fatal("cannot read the command's parent")
	}
	if err := syscall.Kill(ppid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(ppid, syscall.SIGCONT) })
	time.Sleep(3 * time.Second) // three TTLs of deadlines pile up
	if err := syscall.Kill(ppid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if processGone(pid) {
		t.Fatalf("the guard stopped the command of a lock renewed all along:\n%v", p.wait(60*time.Second))
	}
	if info, err := adminOn(t, rdb).Inspect(context.Background(), key); err != nil || !info.Held {
		t.Fatalf("the lock is not held: %+v, %v", info, err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	expectCode(t, p.wait(60*time.Second), 0)
}
