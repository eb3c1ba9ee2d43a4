package dlock_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/legacy"
)

func readersKey(k string) string { return "dlock:{" + k + "}:readers" }

// maxGauge tracks a count and the highest value it reached.
type maxGauge struct{ cur, max atomic.Int64 }

func (g *maxGauge) inc() int64 {
	n := g.cur.Add(1)
	for {
		m := g.max.Load()
		if n <= m || g.max.CompareAndSwap(m, n) {
			return n
		}
	}
}

func (g *maxGauge) dec() { g.cur.Add(-1) }

// 20 readers hold the lock at the same time; writers are exclusive, with
// readers and with each other (observed from shared counters).
func TestSharedReadersConcurrentWriterExclusive(t *testing.T) {
	k := key(t)
	ctx := t.Context()
	clients := make([]*dlock.Client, 4)
	for i := range clients {
		clients[i], _ = newClient(t, dlock.Options{})
	}
	// Phase 1: 20 readers in at once (each waits until all 20 are in).
	var readers maxGauge
	var all sync.WaitGroup
	all.Add(20)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk, err := clients[i%4].RWLock(k).RLock(ctx)
			if err != nil {
				t.Error(err)
				all.Done()
				return
			}
			readers.inc()
			all.Done()
			all.Wait()
			readers.dec()
			if err := lk.Unlock(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if readers.max.Load() != 20 {
		t.Fatalf("max concurrent readers %d, want 20", readers.max.Load())
	}
	// Phase 2: readers and writers mixed.
	var writers maxGauge
	readers = maxGauge{}
	var bad atomic.Int64
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[i%4]
			for range 10 {
				if i%5 == 0 { // 4 writers
					lk, err := c.Lock(ctx, k)
					if err != nil {
						t.Error(err)
						return
					}
					if writers.inc() != 1 || readers.cur.Load() != 0 {
						bad.Add(1)
					}
					time.Sleep(200 * time.Microsecond)
					writers.dec()
					lk.Unlock(ctx)
					continue
				}
				lk, err := c.RWLock(k).RLock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				readers.inc()
				if writers.cur.Load() != 0 {
					bad.Add(1)
				}
				time.Sleep(200 * time.Microsecond)
				readers.dec()
				lk.Unlock(ctx)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 || writers.max.Load() != 1 {
		t.Fatalf("%d exclusion violations, max concurrent writers %d", bad.Load(), writers.max.Load())
	}
	if readers.max.Load() < 2 {
		t.Fatalf("readers never overlapped (max %d)", readers.max.Load())
	}
	t.Logf("max concurrent readers with writers about: %d", readers.max.Load())
}

// A stream of overlapping readers never leaves the lock free, yet a
// waiting writer gets it promptly: new readers queue behind it.
func TestSharedWriterNotStarved(t *testing.T) {
	k := key(t)
	ctx := t.Context()
	c, _ := newClient(t, dlock.Options{})
	var readers atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 5 * time.Millisecond) // staggered: always one inside
			for {
				select {
				case <-stop:
					return
				default:
				}
				lk, err := c.RWLock(k).RLock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				readers.Add(1)
				time.Sleep(40 * time.Millisecond)
				readers.Add(-1)
				lk.Unlock(ctx)
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	w, _ := newClient(t, dlock.Options{})
	for range 3 {
		start := time.Now()
		lk, err := w.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		waited := time.Since(start)
		if n := readers.Load(); n != 0 {
			t.Fatalf("writer in with %d readers", n)
		}
		// Readers in when it queued finish within 40ms; allow for a busy
		// machine, but far below the readers' ongoing stream.
		if waited > time.Second {
			t.Fatalf("writer waited %v behind a stream of readers", waited)
		}
		t.Logf("writer waited %v", waited)
		time.Sleep(10 * time.Millisecond)
		lk.Unlock(ctx)
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
}

// A crashed reader frees its share after its own TTL: not before, and
// not later because other readers keep renewing theirs.
func TestSharedReaderCrashFreesItsShareAfterTTL(t *testing.T) {
	const ttl = time.Second
	ctx := t.Context()
	c, rdb := newClient(t, dlock.Options{})

	t.Run("others leave", func(t *testing.T) {
		k := key(t)
		child, _ := startHolder(t, "shared", k, "", 1, 0, ttl)
		other, err := c.RWLock(k).RLock(ctx, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		crashed := child.crash(t)
		other.Unlock(ctx) // a live reader leaves at once
		lk, err := c.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		d := time.Since(crashed)
		// The child renewed at most TTL/3 before it died: its share ends
		// between 2/3 TTL and TTL after the crash.
		if d < 2*ttl/3-50*time.Millisecond || d > ttl+400*time.Millisecond {
			t.Fatalf("writer got the lock %v after the reader crashed (TTL %v)", d, ttl)
		}
		t.Logf("writer in %v after the crash", d)
		lk.Unlock(ctx)
	})

	t.Run("others stay", func(t *testing.T) {
		k := key(t)
		child, _ := startHolder(t, "shared", k, "", 1, 0, ttl)
		// A TTL well above a loaded machine's stalls: this reader must
		// outlive the crashed one, renewing all along.
		other, err := c.RWLock(k).RLock(ctx, dlock.WithTTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		child.crash(t)
		time.Sleep(2 * ttl) // the other reader renews meanwhile
		if err := other.Err(); err != nil {
			t.Fatalf("the live reader was lost: %v", err)
		}
		if n := rdb.ZCard(ctx, readersKey(k)).Val(); n != 1 {
			t.Fatalf("%d readers registered after the crashed one's TTL, want 1", n)
		}
		got := make(chan time.Time, 1)
		go func() {
			lk, err := c.Lock(ctx, k)
			if err != nil {
				t.Error(err)
				return
			}
			got <- time.Now()
			lk.Unlock(ctx)
		}()
		time.Sleep(50 * time.Millisecond)
		released := time.Now()
		other.Unlock(ctx)
		select {
		case at := <-got:
			if d := at.Sub(released); d > 300*time.Millisecond {
				t.Fatalf("writer waited %v after the last live reader left", d)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("writer never got the lock")
		}
	})
}

func TestSharedFencingBothSides(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	ctx := t.Context()
	k := key(t)
	var last uint64
	next := func(lk *dlock.Lock, err error) *dlock.Lock {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if lk.Fence() <= last {
			t.Fatalf("fence %d after %d", lk.Fence(), last)
		}
		last = lk.Fence()
		return lk
	}
	for range 3 {
		r1 := next(c.RWLock(k).RLock(ctx))
		r2 := next(c.RWLock(k).RLock(ctx))
		r1.Unlock(ctx)
		r2.Unlock(ctx)
		w := next(c.Lock(ctx, k))
		w.Unlock(ctx)
	}
}

func TestSharedLostSignal(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		steal func(k, token string)
		cause error
	}{
		{"key deleted", func(k, _ string) { rdb.Del(ctx, k) }, dlock.ErrExpired},
		{"share removed", func(k, tok string) { rdb.ZRem(ctx, readersKey(k), tok) }, dlock.ErrExpired},
		{"key taken", func(k, _ string) { rdb.Set(ctx, k, "writer", time.Minute) }, dlock.ErrTaken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := key(t)
			lk, err := c.RWLock(k).RLock(ctx, dlock.WithTTL(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			tc.steal(k, lk.Token())
			if err := waitDone(t, lk, time.Second); !errors.Is(err, dlock.ErrLost) || !errors.Is(err, tc.cause) {
				t.Fatalf("Err = %v, want ErrLost and %v", err, tc.cause)
			}
			rdb.Del(ctx, k)
		})
	}
}

// While read, the key holds SharedValue with a TTL: SET NX clients are
// excluded; readers queued behind a writer get in together.
func TestSharedInteropAndBatch(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{RetryInterval: time.Minute})
	ctx := t.Context()
	k := key(t)
	r, _ := c.RWLock(k).RLock(ctx)
	if v := rdb.Get(ctx, k).Val(); v != admin.SharedValue {
		t.Fatalf("key holds %q", v)
	}
	if rdb.PTTL(ctx, k).Val() <= 0 || rdb.SetNX(ctx, k, "x", time.Minute).Val() {
		t.Fatal("read-locked key has no TTL, or SET NX got in")
	}
	r.Unlock(ctx)
	w, _ := c.Lock(ctx, k)
	got := make(chan *dlock.Lock, 5)
	for range 5 {
		go func() {
			lk, err := c.RWLock(k).RLock(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- lk
		}()
	}
	waitQueued(t, rdb, k, 5)
	w.Unlock(ctx)
	for range 5 {
		select {
		case lk := <-got:
			defer lk.Unlock(ctx)
		case <-time.After(3 * time.Second):
			t.Fatal("queued readers not let in together")
		}
	}
	if n := rdb.ZCard(ctx, readersKey(k)).Val(); n != 5 {
		t.Fatalf("%d readers in", n)
	}
}

// TestRWLockWriterRefusesProtocol: RWLock's write lock is the token lock
// the readers see; another protocol would put the writer where no reader
// looks, so both Lock and TryLock refuse WithProtocol before any Redis call.
func TestRWLockWriterRefusesProtocol(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	k := key(t)
	p := legacy.New(legacy.Options{Unit: legacy.Milliseconds})
	if _, err := c.RWLock(k).Lock(t.Context(), dlock.WithProtocol(p)); !errors.Is(err, dlock.ErrInvalidOpts) {
		t.Fatalf("RWLock.Lock with WithProtocol = %v", err)
	}
	if _, err := c.RWLock(k).TryLock(t.Context(), dlock.WithProtocol(p)); !errors.Is(err, dlock.ErrInvalidOpts) {
		t.Fatalf("RWLock.TryLock with WithProtocol = %v", err)
	}
	// Without it, the write lock works.
	lk, err := c.RWLock(k).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}
