package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The tests build the dlock binary once and run it against real
// redis-server processes. They never use a Redis on 127.0.0.1:6379: every
// invocation of the binary has a URL ($REDIS_URL is a dead port unless the
// test gives one), and the tests of the "no URL given" default run the
// command in this process with the default at a dead port (inProcessEnv).

var (
	binPath string            // the dlock binary under test
	srv     *redistest.Server // shared by the tests that don't kill or pause it
)

// deadAddr is an address where nothing listens.
const deadAddr = "127.0.0.1:1"

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "dlock-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "dlock")
	args := []string{"build", "-o", binPath}
	if raceEnabled {
		args = append(args, "-race") // the binary's own goroutines are checked too
	}
	build := exec.Command("go", append(args, ".")...)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	s, err := redistest.StartMain(redistest.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "the dlock command tests need redis-server:", err)
		return 1
	}
	srv = s
	code := m.Run()
	_ = s.Close()
	if code == 0 {
		code = redistest.CheckLeaks("dlock command", 0)
	}
	return code
}

// baseEnv is the environment of every dlock the tests run: the test's own,
// with $REDIS_URL at a dead port so that nothing reaches a Redis on 6379
// by accident. A test's own DLOCK_REDIS_URL or REDIS_URL takes precedence.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "DLOCK_") || name == "REDIS_URL" || name == "GORACE" {
			continue
		}
		env = append(env, kv)
	}
	// A race-enabled binary sleeps 1s at exit by default; a race it finds
	// makes it exit 66, which fails the test's exit code check.
	return append(env, "REDIS_URL=redis://"+deadAddr+"/0", "GORACE=atexit_sleep_ms=0 exitcode=66")
}

type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %v\n--- stdout:\n%s--- stderr:\n%s", r.code, r.elapsed.Round(time.Millisecond), r.stdout, r.stderr)
}

// proc is a dlock started in the background.
type proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdout lockedBuffer // read while it runs by out
	stderr lockedBuffer
	start  time.Time
	done   chan struct{}
	res    result
}

// startDlock starts the binary with args; extraEnv is appended to baseEnv.
func startDlock(t testing.TB, extraEnv []string, args ...string) *proc {
	t.Helper()
	return startProc(t, binPath, extraEnv, args...)
}

// startProc starts program path (dlock, or a shell that runs dlock) like
// startDlock.
func startProc(t testing.TB, path string, extraEnv []string, args ...string) *proc {
	t.Helper()
	return startProcAttr(t, nil, path, extraEnv, args...)
}

// startProcAttr is startProc with the process attributes attr.
func startProcAttr(t testing.TB, attr *syscall.SysProcAttr, path string, extraEnv []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, done: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	p.cmd.Env = append(baseEnv(), extraEnv...)
	p.cmd.SysProcAttr = attr
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// Grandchildren that outlive the child must not keep the pipes, and
	// Wait, hanging.
	p.cmd.WaitDelay = 5 * time.Second
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting dlock: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.res = result{code: p.cmd.ProcessState.ExitCode(), stdout: p.stdout.String(),
			stderr: p.stderr.String(), elapsed: time.Since(p.start)}
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.res.code = -int(ws.Signal())
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// out returns what the process has printed on stdout so far.
func (p *proc) out() string { return p.stdout.String() }

// wait waits for the process to exit (at most timeout) and returns its result.
func (p *proc) wait(timeout time.Duration) result {
	p.t.Helper()
	select {
	case <-p.done:
		return p.res
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("dlock %v did not exit within %v; killed:\n%v", p.cmd.Args[1:], timeout, p.res)
		return result{}
	}
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// dlockRun runs the binary to completion (at most 60s).
func dlockRun(t testing.TB, extraEnv []string, args ...string) result {
	t.Helper()
	return startDlock(t, extraEnv, args...).wait(60 * time.Second)
}

// onSrv prepends --redis with the shared server's URL.
func onSrv(args ...string) []string {
	return append([]string{"--redis", srv.URL()}, args...)
}

var keySeq atomic.Int64

// testKey returns a key no other test uses.
func testKey(t testing.TB) string {
	return fmt.Sprintf("test:%s:%d", strings.ReplaceAll(t.Name(), "/", "."), keySeq.Add(1))
}

// lib returns a dlock client and a go-redis client on the shared server.
func lib(t testing.TB) (*dlock.Client, *redis.Client) {
	t.Helper()
	rdb := srv.Client(t)
	c, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, rdb
}

// adminOn returns the admin Client of the locks under the default prefix
// over rdb.
func adminOn(t testing.TB, rdb redis.UniversalClient) *admin.Client {
	t.Helper()
	adm, err := admin.New(rdb, admin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return adm
}

// hold takes key with the library for the rest of the test (or until the
// returned lock is unlocked).
func hold(t testing.TB, key string) *dlock.Lock {
	t.Helper()
	c, _ := lib(t)
	lk, err := c.TryLock(context.Background(), key, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatalf("holding %s: %v", key, err)
	}
	t.Cleanup(func() { _ = lk.Unlock(context.Background()) })
	return lk
}

// waitFor polls cond every 10ms until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func expectCode(t testing.TB, r result, want int) {
	t.Helper()
	if r.code != want {
		t.Fatalf("want exit %d, got %v", want, r)
	}
}

func expectStderr(t testing.TB, r result, substrs ...string) {
	t.Helper()
	for _, s := range substrs {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr lacks %q:\n%v", s, r)
		}
	}
}
