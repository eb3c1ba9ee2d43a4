package dlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fenced"
	"github.com/redis/go-redis/v9"
)

// The "elect" child mode: a candidate process, for tests that kill, pause
// or resign a leader. Hooked in init like the "hold" mode.
func init() {
	if os.Getenv("DLOCK_TEST_CHILD") == "elect" {
		os.Exit(runElectChild())
	}
}

// runElectChild campaigns in the election DLOCK_TEST_KEY as DLOCK_TEST_ID
// with TTL DLOCK_TEST_TTL and prints "campaigning", then "leading <term>".
// While it leads it acts every 10ms: it checks its leadership (Err) and
// then writes its id to the resource DLOCK_TEST_KEY+":res" with fenced.Set,
// printing "acted <term> ok <unix ns>" or "acted <term> refused <unix ns>"
// (the time before the write). When it finds the
// leadership lost it prints "lost <term>" and exits 0. A "resign" line on
// stdin resigns ("resigned").
func runElectChild() int {
	ttl, _ := time.ParseDuration(os.Getenv("DLOCK_TEST_TTL"))
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("DLOCK_TEST_ADDR")})
	c, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	name, id := os.Getenv("DLOCK_TEST_KEY"), os.Getenv("DLOCK_TEST_ID")
	e := c.Election(name, dlock.ElectionOptions{TTL: ttl})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx := context.Background()
	fmt.Println("campaigning")
	l, err := e.Campaign(ctx, id)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("leading", l.Term())
	resign := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "resign" {
				close(resign)
				return
			}
		}
	}()
	t := time.NewTicker(10 * time.Millisecond)
	for {
		select {
		case <-resign:
			if err := l.Resign(ctx); err != nil {
				fmt.Println("error", err)
				return 1
			}
			fmt.Println("resigned")
			return 0
		case <-t.C:
		}
		if l.Err() != nil {
			fmt.Println("lost", l.Term())
			return 0
		}
		sent := time.Now().UnixNano() // before the write: a pause may fall between the write and the print
		err := fenced.Set(ctx, rdb, name+":res", l.Term(), id+":"+strconv.FormatUint(l.Term(), 10), id)
		switch {
		case err == nil:
			fmt.Println("acted", l.Term(), "ok", sent)
		case errors.Is(err, fenced.ErrStale):
			fmt.Println("acted", l.Term(), "refused", sent)
		default:
			fmt.Println("error", err)
		}
	}
}

// candidate is a running elect child.
type candidate struct {
	*holder
	id string
}

func startCandidate(t *testing.T, name, id string, ttl time.Duration) *candidate {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DLOCK_TEST_CHILD=elect", "DLOCK_TEST_ADDR="+redisAddr,
		"DLOCK_TEST_KEY="+name, "DLOCK_TEST_ID="+id, "DLOCK_TEST_TTL="+ttl.String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	h := &holder{cmd: cmd, stdin: stdin, lines: make(chan string, 1<<16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	if l := h.line(t); l != "campaigning" {
		t.Fatalf("%s: %q", id, l)
	}
	return &candidate{holder: h, id: id}
}

// until reads lines until one starts with prefix, and returns it and when
// it was read. Lines starting with "error" fail the test.
func (c *candidate) until(t *testing.T, prefix string, wait time.Duration) (string, time.Time) {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("%s exited before %q", c.id, prefix)
			}
			if strings.HasPrefix(l, "error") {
				t.Fatalf("%s: %s", c.id, l)
			}
			if strings.HasPrefix(l, prefix) {
				return l, time.Now()
			}
		case <-deadline:
			t.Fatalf("%s: no %q line within %v", c.id, prefix, wait)
		}
	}
}

func termOf(t *testing.T, line string) uint64 {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 2 {
		t.Fatalf("line %q has no term", line)
	}
	n, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	return n
}

// waitQueued waits until n candidates are queued behind the leader.
func waitCandidates(t *testing.T, c *dlock.Client, rdb *redis.Client, name string, n int64) {
	t.Helper()
	q := adminOf(t, c).KeysFor(name).Queue
	for deadline := time.Now().Add(20 * time.Second); rdb.LLen(t.Context(), q).Val() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d candidates queued", n)
		}
	}
}

// kill -9 of the leader: the next candidate leads within the TTL, with a
// higher term; a resignation hands over at once.
func TestElectionChildKillAndResign(t *testing.T) {
	const ttl = time.Second
	c, rdb := newClient(t, dlock.Options{})
	name := key(t)
	a := startCandidate(t, name, "a", ttl)
	la, _ := a.until(t, "leading", 20*time.Second)
	b := startCandidate(t, name, "b", ttl)
	waitCandidates(t, c, rdb, name, 1)
	killed := a.crash(t)
	lb, at := b.until(t, "leading", 20*time.Second)
	t.Logf("b leads %v after a was killed (TTL %v)", at.Sub(killed).Round(time.Millisecond), ttl)
	if termOf(t, lb) <= termOf(t, la) {
		t.Fatalf("b's term %s not above a's %s", lb, la)
	}
	b.until(t, "acted", 10*time.Second)

	d := startCandidate(t, name, "d", ttl)
	waitCandidates(t, c, rdb, name, 1)
	resigned := time.Now()
	if _, err := b.stdin.Write([]byte("resign\n")); err != nil {
		t.Fatal(err)
	}
	ld, at := d.until(t, "leading", 20*time.Second)
	t.Logf("d leads %v after b was told to resign", at.Sub(resigned).Round(time.Millisecond))
	if termOf(t, ld) <= termOf(t, lb) {
		t.Fatalf("d's term %s not above b's %s", ld, lb)
	}
	b.until(t, "resigned", 10*time.Second)
}

// A leader paused (SIGSTOP) past its TTL loses: the next candidate leads
// with a higher term, and the paused one, once resumed, finds the loss
// before it acts as leader again (no write of its own is accepted after
// the new leader's).
func TestElectionChildPausedLeader(t *testing.T) {
	const ttl = time.Second
	c, rdb := newClient(t, dlock.Options{})
	name := key(t)
	a := startCandidate(t, name, "a", ttl)
	la, _ := a.until(t, "leading", 20*time.Second)
	a.until(t, "acted", 10*time.Second)
	b := startCandidate(t, name, "b", ttl)
	waitCandidates(t, c, rdb, name, 1)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, a.cmd.Process.Pid)
	stopped := time.Now() // a prints nothing from here until SIGCONT
	lb, at := b.until(t, "leading", 20*time.Second)
	t.Logf("b leads %v after a was paused (TTL %v)", at.Sub(stopped).Round(time.Millisecond), ttl)
	if termOf(t, lb) <= termOf(t, la) {
		t.Fatalf("b's term %s not above a's %s", lb, la)
	}
	b.until(t, "acted", 10*time.Second)
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for {
		l := a.line(t)
		if strings.HasPrefix(l, "lost") {
			break
		}
		// What a printed before its pause may still be in the pipe, and an
		// act whose write was sent before the pause may be printed after
		// it: both are stamped before the pause. After it, at most the one act
		// that was between its check and its write when the pause came;
		// the fence refuses it.
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "acted" {
			if ns, err := strconv.ParseInt(f[3], 10, 64); err == nil && ns < stopped.UnixNano() {
				continue
			}
		}
		if len(f) != 4 || f[0]+" "+f[1]+" "+f[2] != fmt.Sprintf("acted %d refused", termOf(t, la)) {
			t.Fatalf("a after its resume: %q before finding the loss", l)
		}
	}
	last, err := fenced.Last(t.Context(), rdb, name+":res")
	if err != nil || last != termOf(t, lb) {
		t.Fatalf("resource's last fence %d (%v), want b's %s", last, err, lb)
	}
}
