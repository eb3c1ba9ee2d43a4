package dlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// queueKey is the wait queue of a key without braces (see the key layout).
func queueKey(k string) string { return "dlock:{" + k + "}:q" }

// waitQueued waits until the key's queue holds n entries.
func waitQueued(t *testing.T, rdb *redis.Client, k string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.LLen(t.Context(), queueKey(k)).Val() != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue of %q has %d entries, want %d", k, rdb.LLen(t.Context(), queueKey(k)).Val(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestFIFOOrder(t *testing.T) {
	const n = 50
	k := "fifo-order"
	holder, rdb := newClient(t, dlock.Options{})
	lk, err := holder.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	clients := make([]*dlock.Client, 5)
	for i := range clients {
		clients[i], _ = newClient(t, dlock.Options{RetryInterval: time.Minute})
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := clients[i%len(clients)].Lock(t.Context(), k)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := l.Unlock(t.Context()); err != nil {
				t.Error(err)
			}
		}()
		waitQueued(t, rdb, k, int64(i+1)) // waiter i is enqueued before i+1 starts
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("grant order %v, want 0..%d", order, n-1)
		}
	}
	var handoffs uint64
	for _, c := range clients {
		handoffs += c.Stats().Handoffs
	}
	if handoffs != n {
		t.Fatalf("%d hand-offs received, want %d (one per waiter, no retries)", handoffs, n)
	}
}

func TestNoBargingWhileQueued(t *testing.T) {
	k := "fifo-nobarge"
	holder, rdb := newClient(t, dlock.Options{})
	lk, _ := holder.Lock(t.Context(), k)
	waiter, _ := newClient(t, dlock.Options{})
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := waiter.Lock(t.Context(), k)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueued(t, rdb, k, 1)
	// A foreign client frees the key behind the queue's back.
	rdb.Del(t.Context(), k)
	// A newcomer must not jump the queue: TryLock is refused...
	_, err := holder.TryLock(t.Context(), k)
	var na *dlock.NotAcquiredError
	if !errors.As(err, &na) || na.TTL != 0 {
		t.Fatalf("TryLock with a live waiter queued = %v, want NotAcquired with TTL 0", err)
	}
	// ...and the queued waiter takes it by its own retry.
	select {
	case l := <-got:
		l.Unlock(t.Context())
	case <-time.After(3 * time.Second):
		t.Fatal("queued waiter did not pick up the freed key")
	}
	lk.Unlock(t.Context()) // lost long ago: must not touch the new state
}

func TestCancelledWaitersLeaveQueue(t *testing.T) {
	k := "fifo-cancel"
	holder, rdb := newClient(t, dlock.Options{})
	lk, _ := holder.Lock(t.Context(), k)
	c, _ := newClient(t, dlock.Options{WaiterLease: 300 * time.Millisecond})
	var cancels []context.CancelFunc
	errs := make(chan error, 10)
	for i := range 10 {
		ctx, cancel := context.WithCancel(t.Context())
		cancels = append(cancels, cancel)
		go func() {
			l, err := c.Lock(ctx, k)
			if err == nil {
				err = l.Unlock(t.Context())
			}
			errs <- err
		}()
		waitQueued(t, rdb, k, int64(i+1))
	}
	for i := 0; i < 10; i += 2 {
		cancels[i]()
	}
	waitQueued(t, rdb, k, 5)
	lk.Unlock(t.Context())
	var canceled, ok int
	for range 10 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, context.Canceled):
			canceled++
		default:
			t.Fatal(err)
		}
	}
	if ok != 5 || canceled != 5 {
		t.Fatalf("%d acquired, %d cancelled", ok, canceled)
	}
	waitQueued(t, rdb, k, 0)
	// Leavers replace their lease by a short tombstone (a late acquire of
	// theirs is refused), and so does every holder that released (a
	// release re-sent by the Redis client finds it and is not a loss).
	ks := adminOf(t, c).KeysFor(k)
	if left := rdb.HGetAll(t.Context(), ks.Waiters).Val(); len(left) != 0 {
		t.Fatalf("waiter leases left behind: %v", left)
	}
	tombs := rdb.ZRangeWithScores(t.Context(), ks.Tombs, 0, -1).Val()
	now := time.Now().UnixMilli()
	for _, z := range tombs {
		if end := int64(z.Score); end > now+11000 {
			t.Fatalf("tombstone of %v ends in %v", z.Member, time.Duration(end-now)*time.Millisecond)
		}
	}
	if len(tombs) != 11 {
		t.Fatalf("%d tombstones, want one per leaver (5) and per released holder (6)", len(tombs))
	}
	for _, cancel := range cancels {
		cancel()
	}
}

func TestHandoffManyWaitersNoOverlap(t *testing.T) {
	const waiters = 200
	k := "fifo-200"
	var inside, overlaps, done atomic.Int64
	var wg sync.WaitGroup
	clients := make([]*dlock.Client, 8)
	for i := range clients {
		clients[i], _ = newClient(t, dlock.Options{})
	}
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := clients[i%len(clients)].Lock(t.Context(), k)
			if err != nil {
				t.Error(err)
				return
			}
			if inside.Add(1) != 1 {
				overlaps.Add(1)
			}
			time.Sleep(50 * time.Microsecond)
			inside.Add(-1)
			done.Add(1)
			if err := l.Unlock(t.Context()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 || done.Load() != waiters {
		t.Fatalf("%d overlaps, %d of %d done", overlaps.Load(), done.Load(), waiters)
	}
}

func TestBargingMode(t *testing.T) {
	k := "barging"
	var inside, overlaps atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		c, _ := newClient(t, dlock.Options{Barging: true})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					l, err := c.Lock(t.Context(), k)
					if err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					inside.Add(-1)
					l.Unlock(t.Context())
				}
			}()
		}
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlaps", overlaps.Load())
	}
	_, rdb := newClient(t, dlock.Options{})
	if n := rdb.Exists(t.Context(), queueKey(k)).Val(); n != 0 {
		t.Fatal("barging waiters used the queue")
	}
}

// child starts a waiter process (see runChild) and returns it with a reader
// of its output lines.
func child(t *testing.T, k string, lease, pickup time.Duration) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DLOCK_TEST_CHILD=1", "DLOCK_TEST_ADDR="+redisAddr, "DLOCK_TEST_KEY="+k,
		"DLOCK_TEST_LEASE="+lease.String(), "DLOCK_TEST_PICKUP="+pickup.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines
}

// A waiter at the head of the queue that dies, or stops, holds the others up
// for at most the pickup time plus a third of the queue lease.
func TestDeadOrStoppedHeadWaiter(t *testing.T) {
	const lease, pickup = 900 * time.Millisecond, 300 * time.Millisecond
	for _, how := range []string{"SIGKILL", "SIGSTOP"} {
		t.Run(how, func(t *testing.T) {
			k := "fifo-dead-head-" + how
			opts := dlock.Options{WaiterLease: lease, PickupTimeout: pickup}
			holder, rdb := newClient(t, opts)
			lk, err := holder.Lock(t.Context(), k)
			if err != nil {
				t.Fatal(err)
			}
			proc, lines := child(t, k, lease, pickup)
			if l := <-lines; l != "waiting" {
				t.Fatalf("child: %q", l)
			}
			waitQueued(t, rdb, k, 1)
			// A live waiter queues behind the child.
			next, _ := newClient(t, opts)
			got := make(chan time.Time, 1)
			go func() {
				l, err := next.Lock(t.Context(), k)
				if err != nil {
					t.Error(err)
					return
				}
				got <- time.Now()
				l.Unlock(t.Context())
			}()
			waitQueued(t, rdb, k, 2)
			if how == "SIGKILL" {
				_ = proc.Process.Kill()
			} else {
				_ = proc.Process.Signal(syscall.SIGSTOP)
				waitStopped(t, proc.Process.Pid)
			}
			released := time.Now()
			// Released at once: the child's lease is still live, so the
			// hand-off goes to it and has to lapse.
			if err := lk.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			var at time.Time
			select {
			case at = <-got:
			case <-time.After(5 * time.Second):
				t.Fatal("the live waiter never got the lock")
			}
			bound := pickup + lease/3 + 300*time.Millisecond // scheduling slack on a shared machine
			if d := at.Sub(released); d > bound {
				t.Fatalf("live waiter got the lock %v after release, bound %v", d, bound)
			}
			if how == "SIGSTOP" {
				// Resumed long after its hand-off lapsed, the child must
				// not believe it holds the lock while someone else does.
				other, err := holder.Lock(t.Context(), k, dlock.WithTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				_ = proc.Process.Signal(syscall.SIGCONT)
				select {
				case l := <-lines:
					if strings.HasPrefix(l, "acquired") {
						t.Fatalf("resumed child claims the lock while it is held elsewhere: %q", l)
					}
				case <-time.After(lease + pickup):
				}
				// It is still a waiter: it gets the lock after a release.
				other.Unlock(t.Context())
				select {
				case l := <-lines:
					if !strings.HasPrefix(l, "acquired") {
						t.Fatalf("child: %q", l)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("resumed child never got the lock")
				}
			}
		})
	}
}

func ExampleOptions_barging() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	// FIFO hand-off is the default; Barging makes waiters race instead.
	locks, _ := dlock.New(rdb, dlock.Options{Barging: true})
	defer locks.Close()
	l, err := locks.Lock(context.Background(), "example:barging")
	fmt.Println(err)
	l.Unlock(context.Background())
	// Output:
	// <nil>
}

// waitStopped waits until the kernel reports pid as stopped (state T), so
// the test knows the process can no longer act.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the command name in parentheses.
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "T" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop", pid)
		}
		time.Sleep(time.Millisecond)
	}
}
