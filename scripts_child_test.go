package dlock_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The "contend" child mode: a process that keeps every kind of lock busy
// on DLOCK_TEST_KEYS keys named DLOCK_TEST_KEY:<i>, for tests that kill
// every client mid-contention. Hooked in init, like the "hold" mode.
func init() {
	if os.Getenv("DLOCK_TEST_CHILD") == "contend" {
		os.Exit(runContendChild())
	}
}

const (
	contendTTL   = time.Second
	contendLease = time.Second
)

// runContendChild prints "running" once every kind has been acquired
// once, then contends until killed.
func runContendChild() int {
	n, _ := strconv.Atoi(os.Getenv("DLOCK_TEST_KEYS"))
	base := os.Getenv("DLOCK_TEST_KEY")
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("DLOCK_TEST_ADDR")})
	c, err := dlock.New(rdb, dlock.Options{WaiterLease: contendLease, PickupTimeout: 200 * time.Millisecond})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx := context.Background()
	kinds := []func(i, g int) (*dlock.Lock, error){
		func(i, _ int) (*dlock.Lock, error) {
			return c.Lock(ctx, fmt.Sprintf("%s:%d", base, i), dlock.WithTTL(contendTTL))
		},
		func(i, g int) (*dlock.Lock, error) {
			return c.Reentrant(fmt.Sprintf("%s:r%d", base, i)).Lock(ctx, fmt.Sprintf("o%d-%d", os.Getpid(), g), dlock.WithTTL(contendTTL))
		},
		func(i, _ int) (*dlock.Lock, error) {
			return c.RWLock(fmt.Sprintf("%s:s%d", base, i)).RLock(ctx, dlock.WithTTL(contendTTL))
		},
		func(i, _ int) (*dlock.Lock, error) {
			return c.Lock(ctx, fmt.Sprintf("%s:s%d", base, i), dlock.WithTTL(contendTTL)) // the writers
		},
		func(i, _ int) (*dlock.Lock, error) {
			return c.Semaphore(fmt.Sprintf("%s:m%d", base, i), 2).Acquire(ctx, 1, dlock.WithTTL(contendTTL))
		},
		func(i, _ int) (*dlock.Lock, error) {
			return c.LockMulti(ctx, []string{fmt.Sprintf("%s:%d", base, i), fmt.Sprintf("%s:%d", base, (i+1)%n)}, dlock.WithTTL(contendTTL))
		},
	}
	var once sync.Map
	var ready sync.WaitGroup
	for k := range kinds {
		ready.Add(1)
		for i := range n {
			for g := range 2 {
				go func() {
					for {
						lk, err := kinds[k](i, g)
						if err != nil {
							time.Sleep(10 * time.Millisecond)
							continue
						}
						if _, loaded := once.LoadOrStore(k, true); !loaded {
							ready.Done()
						}
						time.Sleep(5 * time.Millisecond)
						_ = lk.Unlock(ctx)
					}
				}()
			}
		}
	}
	ready.Wait()
	fmt.Println("running")
	select {}
}

// TestEveryKeyExpiresAfterClientsDie: kill -9 every client process in the
// middle of contention on many keys of every kind (exclusive, reentrant,
// shared with writers, semaphore, multi-key): every key dlock made expires
// by itself, within the longest TTL + waiter lease + fence counter TTL.
// Before, wait queues had no TTL: the lists of dead waiters stayed forever.
func TestEveryKeyExpiresAfterClientsDie(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	rdb := s.Client(t)
	ctx := t.Context()
	const keys, procs = 6, 3
	var cmds []*exec.Cmd
	for range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "DLOCK_TEST_CHILD=contend", "DLOCK_TEST_ADDR="+s.Addr(),
			"DLOCK_TEST_KEY=expire", "DLOCK_TEST_KEYS="+strconv.Itoa(keys))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		cmds = append(cmds, cmd)
		lines := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				select {
				case lines <- sc.Text():
				default:
				}
			}
		}()
		select {
		case l := <-lines:
			if l != "running" {
				t.Fatalf("child: %q", l)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("child not running after 30s")
		}
	}
	// Mid-contention: waiters queued on several keys.
	deadline := time.Now().Add(10 * time.Second)
	for {
		qs, _ := rdb.Keys(ctx, "dlock:*:q").Result()
		if len(qs) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no contention: queues %v", qs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, cmd := range cmds {
		_ = cmd.Process.Signal(syscall.SIGKILL)
	}
	for _, cmd := range cmds {
		_, _ = cmd.Process.Wait()
	}
	killed := time.Now()
	n0 := rdb.DBSize(ctx).Val()
	// Safety bound, with slack for a loaded machine: the longest TTL, the
	// waiter lease and the fence counter's TTL (TTL + 10 s).
	bound := contendTTL + contendLease + contendTTL + 10*time.Second
	for rdb.DBSize(ctx).Val() != 0 {
		if time.Since(killed) > bound+5*time.Second {
			all, _ := rdb.Keys(ctx, "*").Result()
			var left []string
			for _, k := range all {
				left = append(left, fmt.Sprintf("%s (%s, ttl %v)", k, rdb.Type(ctx, k).Val(), rdb.PTTL(ctx, k).Val()))
			}
			t.Fatalf("%d keys left %v after every client died (%d at the kill): %s", len(all), time.Since(killed).Round(time.Millisecond), n0, strings.Join(left, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d keys at the kill; all expired %v later", n0, time.Since(killed).Round(time.Millisecond))
}
