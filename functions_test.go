package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// commandCalls returns the calls of each command rc's server ran, by name,
// from INFO commandstats ("fcall", "evalsha", "function|load", ...).
func commandCalls(t *testing.T, rc *redis.Client) map[string]int64 {
	t.Helper()
	info, err := rc.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(rest, "calls=") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		by[name] = n
	}
	return by
}

// lockPairs takes and releases n locks on keys of k, by Lock and by TryLock.
func lockPairs(t *testing.T, c *dlock.Client, k string, n int) {
	t.Helper()
	ctx := t.Context()
	for i := range n {
		lk, err := c.Lock(ctx, fmt.Sprintf("%s:%d", k, i))
		if err != nil {
			t.Fatalf("Lock %d: %v", i, err)
		}
		if _, err := c.TryLock(ctx, fmt.Sprintf("%s:%d", k, i)); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock of a held key: %v, want ErrNotAcquired", err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %d: %v", i, err)
		}
	}
}

// hasLibrary reports whether rc's server has dlock's function library.
func hasLibrary(t *testing.T, rc *redis.Client) bool {
	t.Helper()
	libs, err := rc.FunctionList(t.Context(), redis.FunctionListQuery{LibraryNamePattern: scripts.Lib().Name}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(libs) == 1
}

// On a server with Functions, a Client loads its library once and runs its
// scripts by FCALL; with NoFunctions, by EVALSHA, and loads nothing.
func TestFunctionsRunScripts(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoFunctions=%v", off), func(t *testing.T) {
			s := redistest.Start(t, redistest.Config{})
			admin := s.Client(t)
			c, _ := newClientOn(t, s.NewClient(), dlock.Options{NoFunctions: off})
			lockPairs(t, c, key(t), 5)
			by := commandCalls(t, admin)
			if off {
				if by["fcall"] != 0 || by["function|load"] != 0 || by["evalsha"] == 0 || hasLibrary(t, admin) {
					t.Fatalf("NoFunctions: fcall %d, function|load %d, evalsha %d; want 0, 0, > 0 and no library",
						by["fcall"], by["function|load"], by["evalsha"])
				}
				return
			}
			if by["fcall"] < 15 || by["evalsha"] != 0 || by["eval"] != 0 || by["function|load"] != 1 {
				t.Fatalf("fcall %d, evalsha %d, eval %d, function|load %d; want >= 15, 0, 0, 1",
					by["fcall"], by["evalsha"], by["eval"], by["function|load"])
			}
		})
	}
}

// A user whose ACL denies FUNCTION LOAD, or FCALL, runs the scripts by
// EVALSHA; one denied FUNCTION LOAD but allowed FCALL uses a library an
// administrator loaded.
func TestFunctionsRefusedByACL(t *testing.T) {
	for _, tc := range []struct {
		rules   string
		preload bool // an administrator loaded the library
		fcalls  bool // the common path is FCALL
	}{
		{"~* &* +@all -function", false, false},
		{"~* &* +@all -fcall", false, false},
		{"~* &* +@all -fcall -function", true, false},
		{"~* &* +@all -function", true, true},
	} {
		t.Run(fmt.Sprintf("%s/preloaded=%v", tc.rules, tc.preload), func(t *testing.T) {
			ctx := t.Context()
			s := redistest.Start(t, redistest.Config{})
			admin := s.Client(t)
			args := []any{"ACL", "SETUSER", "app", "reset", "on", ">pw"}
			for _, r := range strings.Fields(tc.rules) {
				args = append(args, r)
			}
			if err := admin.Do(ctx, args...).Err(); err != nil {
				t.Fatal(err)
			}
			if tc.preload {
				if err := admin.FunctionLoad(ctx, scripts.Lib().Code).Err(); err != nil {
					t.Fatal(err)
				}
			}
			c, _ := newClientOn(t, redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "app", Password: "pw"}), dlock.Options{})
			lockPairs(t, c, key(t), 5)
			by := commandCalls(t, admin)
			if tc.fcalls {
				if by["fcall"] < 15 || by["evalsha"] != 0 {
					t.Fatalf("fcall %d, evalsha %d; want >= 15 and 0", by["fcall"], by["evalsha"])
				}
				return
			}
			// At most the first call tries FCALL (or FUNCTION LOAD).
			if by["fcall"] > 1 || by["evalsha"] < 14 {
				t.Fatalf("fcall %d, evalsha %d; want <= 1 and >= 14", by["fcall"], by["evalsha"])
			}
		})
	}
}

// FUNCTION FLUSH while goroutines take and release locks: every call
// succeeds (those that found the library gone load it again).
func TestFunctionFlushMidRun(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	admin := s.Client(t)
	c, _ := newClientOn(t, s.NewClient(), dlock.Options{})
	ctx := t.Context()
	k := key(t)
	var stop atomic.Bool
	var pairs atomic.Int64
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				lk, err := c.Lock(ctx, fmt.Sprintf("%s:%d:%d", k, g, i%4))
				if err == nil {
					err = lk.Unlock(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
				pairs.Add(1)
			}
		}()
	}
	for range 5 {
		start := pairs.Load()
		waitFor(t, "pairs between flushes", func() bool { return pairs.Load() >= start+20 || len(errs) > 0 })
		if err := admin.FunctionFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	start := pairs.Load()
	waitFor(t, "pairs after the last flush", func() bool { return pairs.Load() >= start+20 || len(errs) > 0 })
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a lock pair failed across FUNCTION FLUSH: %v", err)
	}
	by := commandCalls(t, admin)
	if by["function|load"] < 2 || !hasLibrary(t, admin) {
		t.Fatalf("function|load %d, library there %v; want >= 2 loads and the library", by["function|load"], hasLibrary(t, admin))
	}
}

// A server over maxmemory refuses an FCALL whole; the Client then sends the
// script by EVALSHA, whose writes Redis checks one by one, so a release
// (which frees memory) still runs, and an acquire is refused.
func TestFunctionRefusedOverMaxmemory(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	admin := s.Client(t)
	c, _ := newClientOn(t, s.NewClient(), dlock.Options{})
	ctx := t.Context()
	k := key(t)
	lk, err := c.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer admin.ConfigSet(context.WithoutCancel(ctx), "maxmemory", "0")
	if _, err := c.TryLock(ctx, k+":other"); err == nil || errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock over maxmemory: %v, want Redis's refusal", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatalf("Unlock over maxmemory: %v", err)
	}
	if n := admin.Exists(ctx, k).Val(); n != 0 {
		t.Fatal("the lock key is still there after Unlock")
	}
	if !dlock.UsesFunctions(c) {
		t.Fatal("the Client stopped using Functions")
	}
}

// On a Cluster, the library is loaded on every master, and after a
// failover the promoted replica runs it (Functions replicate).
func TestFunctionsCluster(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterConfig{Replicas: 1})
	ctx := t.Context()
	c, err := dlock.New(cl.NewClient(), dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k := key(t)
	lockPairs(t, c, k, 30) // 30 keys: every master's slots, surely
	masters := cl.Masters(ctx)
	for _, m := range masters {
		rc := m.Client(t)
		if by := commandCalls(t, rc); !hasLibrary(t, rc) || by["fcall"] == 0 || by["evalsha"] != 0 {
			t.Fatalf("master %s: library %v, fcall %d, evalsha %d; want the library, FCALLs only",
				m.Addr(), hasLibrary(t, rc), by["fcall"], by["evalsha"])
		}
	}
	old, err := cl.MasterOf(ctx, k+":0")
	if err != nil {
		t.Fatal(err)
	}
	var replica *redistest.Server
	for _, n := range cl.Nodes {
		if role, _ := n.Client(t).Do(ctx, "ROLE").Slice(); len(role) > 2 && role[0] == "slave" &&
			fmt.Sprint(role[2]) == strconv.Itoa(portOf(old.Addr())) {
			replica = n
		}
	}
	if replica == nil {
		t.Fatal("no replica of the key's master")
	}
	nm, err := cl.ManualFailover(ctx, t, replica, k+":0", old)
	if err != nil {
		t.Fatal(err)
	}
	before := commandCalls(t, nm.Client(t))
	deadline := time.Now().Add(20 * time.Second)
	for {
		lk, err := c.Lock(ctx, k+":0")
		if err == nil {
			if err = lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lock after the failover: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	after := commandCalls(t, nm.Client(t))
	if after["fcall"] <= before["fcall"] || after["evalsha"] != 0 {
		t.Fatalf("promoted master: fcall %d -> %d, evalsha %d; want FCALLs only", before["fcall"], after["fcall"], after["evalsha"])
	}
}

// portOf returns the port of addr.
func portOf(addr string) int {
	_, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.Atoi(p)
	return n
}
