package dlock_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// The "hold" child mode: a process holding a reentrant, shared or
// semaphore lock, for tests that share a hold across processes or crash a
// holder. It is hooked in init, which runs before TestMain, so main_test.go
// (whose runChild is the FIFO waiter) needs no change.
func init() {
	if os.Getenv("DLOCK_TEST_CHILD") == "hold" {
		os.Exit(runHoldChild())
	}
}

// runHoldChild connects to DLOCK_TEST_ADDR and acquires DLOCK_TEST_KEY
// DLOCK_TEST_DEPTH times as DLOCK_TEST_KIND (reentrant for
// DLOCK_TEST_OWNER, shared, or semaphore of DLOCK_TEST_LIMIT) with TTL
// DLOCK_TEST_TTL, printing "held <depth> <fence>". Then each "release" line
// on stdin releases one handle and prints "released <left>". It holds the
// rest (renewing them) until killed or stdin closes.
func runHoldChild() int {
	ttl, _ := time.ParseDuration(os.Getenv("DLOCK_TEST_TTL"))
	depth, _ := strconv.Atoi(os.Getenv("DLOCK_TEST_DEPTH"))
	limit, _ := strconv.Atoi(os.Getenv("DLOCK_TEST_LIMIT"))
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("DLOCK_TEST_ADDR")})
	c, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	var take primitive
	switch os.Getenv("DLOCK_TEST_KIND") {
	case "reentrant":
		take = reentrant(os.Getenv("DLOCK_TEST_OWNER"))
	case "shared":
		take = readers()
	case "semaphore":
		take = permits(limit, 1)
	}
	ctx := context.Background()
	var held []*dlock.Lock
	for range depth {
		lk, err := take.Lock(ctx, c, os.Getenv("DLOCK_TEST_KEY"), dlock.WithTTL(ttl))
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		held = append(held, lk)
	}
	fmt.Println("held", len(held), held[0].Fence())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "release" && len(held) > 0 {
			if err := held[len(held)-1].Unlock(ctx); err != nil {
				fmt.Println("error", err)
				return 1
			}
			held = held[:len(held)-1]
			fmt.Println("released", len(held))
		}
	}
	select {} // stdin closed: keep holding until killed
}

// holder is a running hold child.
type holder struct {
	cmd   *exec.Cmd
	stdin interface{ Write([]byte) (int, error) }
	lines chan string
}

// startHolder starts a hold child (see runHoldChild) and waits for its
// "held" line, returning the fence it reported.
func startHolder(t *testing.T, kind, k, owner string, depth, limit int, ttl time.Duration) (*holder, uint64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DLOCK_TEST_CHILD=hold", "DLOCK_TEST_ADDR="+redisAddr,
		"DLOCK_TEST_KEY="+k, "DLOCK_TEST_KIND="+kind, "DLOCK_TEST_OWNER="+owner,
		"DLOCK_TEST_DEPTH="+strconv.Itoa(depth), "DLOCK_TEST_LIMIT="+strconv.Itoa(limit),
		"DLOCK_TEST_TTL="+ttl.String())
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
	h := &holder{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	line := h.line(t)
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "held" {
		t.Fatalf("holder: %q", line)
	}
	fence, _ := strconv.ParseUint(f[2], 10, 64)
	return h, fence
}

func (h *holder) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			t.Fatal("holder exited")
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("holder silent for 10s")
		return ""
	}
}

// release makes the holder release one handle and returns how many it
// still holds.
func (h *holder) release(t *testing.T) int {
	t.Helper()
	if _, err := h.stdin.Write([]byte("release\n")); err != nil {
		t.Fatal(err)
	}
	l := h.line(t)
	var left int
	if _, err := fmt.Sscanf(l, "released %d", &left); err != nil {
		t.Fatalf("holder: %q", l)
	}
	return left
}

// crash kills the holder with SIGKILL and returns when it is dead.
func (h *holder) crash(t *testing.T) time.Time {
	t.Helper()
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	_, _ = h.cmd.Process.Wait()
	return time.Now()
}
