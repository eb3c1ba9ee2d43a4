package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// A child is a worker in its own process (the test binary re-executed with
// childEnv set), for the faults that need one: SIGSTOP of a holder, SIGKILL
// of a holder. It records its events on the parent's time base (see timeBase)
// and streams them on stdout; its stdin releases it from a pause point.

const childEnv = "DLOCK_FAULTS_CHILD"

type childConfig struct {
	// Role: "holder" acquires, writes, releases and exits; "squatter"
	// acquires, writes once and holds (renewing) until killed.
	Role     string
	Proc     int
	LockAddr string
	ResAddr  string
	Key      string
	TTL      time.Duration
	Wait     time.Duration // Lock's context timeout
	Writes   int
	Hold     time.Duration
	PauseAt  int // before write PauseAt, mark "before-write" and wait for a line on stdin (-1: never)
	Fenced   bool
	Lease    time.Duration // dlock.Options.WaiterLease (0: default)
	Pickup   time.Duration // dlock.Options.PickupTimeout (0: default)
	Duty     float64       // Role "hog": spin this fraction of the time (see Load)
	// Mode, Owner, Limit: the kind of lock (modeShared, modeSemaphore of
	// Limit, a reentrant Owner; default a plain lock).
	Mode  string
	Owner string
	Limit int
}

func (c childConfig) spec() grantSpec {
	switch {
	case c.Mode == modeShared:
		return sharedSpec()
	case c.Mode == modeSemaphore:
		return semSpec(max(c.Limit, 1), 1)
	case c.Owner != "":
		return reentrantSpec(c.Owner)
	}
	return grantSpec{}
}

// childMain is the child's whole life.
func childMain(js string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		fmt.Println("child: bad config:", err)
		return 2
	}
	if cfg.Role == "hog" {
		return hogMain(cfg.Duty)
	}
	clock, err := timeBaseFromEnv()
	if err != nil || clock == nil {
		fmt.Println("child: no time base:", err)
		return 2
	}
	redis.SetLogger(quiet{})
	rec := newStreamRecorder(os.Stdout)
	var marks atomic.Uint64
	mark := func(note string) {
		rec.Record(event{Type: evOK, ID: uint64(cfg.Proc+1)<<40 | 1<<39 | marks.Add(1),
			Proc: cfg.Proc, T: clock.Now(), Kind: kindMark, Note: note})
	}
	mark("hello")
	rdb := redis.NewClient(&redis.Options{Addr: cfg.LockAddr, ContextTimeoutEnabled: true, DialTimeout: 500 * time.Millisecond})
	node, err := newNode(rdb, dlock.Options{WaiterLease: cfg.Lease, PickupTimeout: cfg.Pickup}, clock, rec)
	if err != nil {
		fmt.Println("child:", err)
		return 2
	}
	w := &worker{Proc: cfg.Proc, Node: node, Fenced: cfg.Fenced}
	if cfg.ResAddr != "" {
		w.Res = redis.NewClient(&redis.Options{Addr: cfg.ResAddr, ContextTimeoutEnabled: true})
	}
	stdin := bufio.NewReader(os.Stdin)
	w.BeforeWrite = func(_ *dlock.Lock, i int) {
		if i == cfg.PauseAt {
			mark("before-write")
			_, _ = stdin.ReadString('\n')
		}
	}
	ctx := context.Background()
	actx, cancel := context.WithTimeout(ctx, cfg.Wait)
	lk := w.AcquireSpec(actx, cfg.Key, cfg.TTL, true, cfg.spec())
	cancel()
	if lk == nil {
		mark("not-acquired")
		return 0
	}
	mark("acquired")
	switch cfg.Role {
	case "squatter":
		w.Work(ctx, lk, 1, 0)
		mark("holding")
		select {}
	default:
		w.Work(ctx, lk, cfg.Writes, cfg.Hold)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = w.Release(rctx, lk)
		cancel()
		mark("done")
		_ = node.Close()
	}
	return 0
}

// child is the parent's handle on a child process.
type child struct {
	h     *harness
	cfg   childConfig
	cmd   *exec.Cmd
	stdin io.WriteCloser
	marks chan event
	exit  chan struct{} // closed when the child's output ended
}

// spawn starts a child worker and waits for its first event, checking that
// the child's time base agrees with the parent's.
func (h *harness) spawn(cfg childConfig) *child {
	h.t.Helper()
	cfg.Proc = h.nextProc()
	if cfg.Wait == 0 {
		cfg.Wait = 10 * time.Second
	}
	js, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(js), clock.Env(), "GORACE=atexit_sleep_ms=0")
	cmd.Env = append(cmd.Env, childEnvFor(h.sc.load)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	c := &child{h: h, cfg: cfg, cmd: cmd, stdin: in, marks: make(chan event, 16), exit: make(chan struct{})}
	started := clock.Now()
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		c.reap()
	})
	go func() {
		defer close(c.exit)
		err := readEvents(out, h.hist, func(e event) {
			if e.Kind == kindMark {
				c.marks <- e
			}
		}, func(line string) { h.t.Logf("child %d: %s", cfg.Proc, line) })
		if err != nil {
			h.t.Errorf("child %d: %v", cfg.Proc, err)
		}
	}()
	hello := c.waitMark("hello", 20*time.Second)
	read := clock.Now()
	if hello.T < started-int64(time.Millisecond) || hello.T > read+int64(time.Millisecond) {
		h.t.Fatalf("child %d's time base disagrees with the parent's: it started at %s, between %s and %s "+
			"(its CLOCK_MONOTONIC placement is off)", cfg.Proc, dur(hello.T), dur(started), dur(read))
	}
	return c
}

// waitMark waits for the child's next marker, which must be note.
func (c *child) waitMark(note string, timeout time.Duration) event {
	c.h.t.Helper()
	select {
	case e := <-c.marks:
		if e.Note != note {
			c.h.t.Fatalf("child %d: marker %q, want %q", c.cfg.Proc, e.Note, note)
		}
		return e
	case <-time.After(timeout):
		c.h.t.Fatalf("child %d: no %q marker within %v", c.cfg.Proc, note, timeout)
	}
	return event{}
}

// nextMark returns the child's next marker ("" if none came in time).
func (c *child) nextMark(timeout time.Duration) string {
	select {
	case e := <-c.marks:
		return e.Note
	case <-time.After(timeout):
		return ""
	}
}

// stop SIGSTOPs the child and waits until the kernel reports it stopped.
// It returns the moment the signal was sent.
func (c *child) stop() int64 {
	c.h.t.Helper()
	at := clock.Now()
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.h.t.Fatal(err)
	}
	waitState(c.h.t, c.cmd.Process.Pid, "T")
	return at
}

// cont resumes a stopped child, first queueing line on its stdin (what a
// pause point waits for), and records the pause from since.
func (c *child) cont(since int64, line string) {
	c.h.t.Helper()
	if line != "" {
		if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
			c.h.t.Fatal(err)
		}
	}
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		c.h.t.Fatal(err)
	}
	c.h.nem.Span(kindPause, c.cfg.Proc, "SIGSTOP", since, clock.Now())
}

// kill SIGKILLs the child and records the crash.
func (c *child) kill() {
	c.h.t.Helper()
	at := clock.Now()
	_ = c.cmd.Process.Kill()
	c.h.nem.Crash(c.cfg.Proc, at, "SIGKILL")
	c.reap()
}

// reap waits for the child's output to end, then for the process (Wait
// closes the pipe, so it must come after the last read).
func (c *child) reap() {
	select {
	case <-c.exit:
	case <-time.After(10 * time.Second):
	}
	_ = c.cmd.Wait()
}

// wait waits for the child to finish its output, at most timeout.
func (c *child) wait(timeout time.Duration) {
	c.h.t.Helper()
	select {
	case <-c.exit:
		_ = c.cmd.Wait()
	case <-time.After(timeout):
		c.h.t.Fatalf("child %d did not finish within %v", c.cfg.Proc, timeout)
	}
}

// waitState waits until /proc reports pid in state (e.g. "T": stopped).
func waitState(t *testing.T, pid int, state string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 && f[0] == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never reached state %s", pid, state)
		}
		time.Sleep(time.Millisecond)
	}
}

// quiet drops go-redis's own log lines (dial failures of killed servers).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
