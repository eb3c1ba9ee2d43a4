package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/fenced"
)

// auxNames returns every auxiliary name a lock on key has under adm's prefix,
// by kind (an operation record with a made-up id of the real shape).
func auxNames(adm *admin.Client, key string) map[admin.AuxKind]string {
	ks := adm.KeysFor(key)
	base := strings.TrimSuffix(ks.Fence, ":fence")
	return map[admin.AuxKind]string{
		admin.AuxFence: ks.Fence, admin.AuxQueue: ks.Queue, admin.AuxWake: ks.Wake,
		admin.AuxOp:      ks.Queue + ":AAAAAAAAAAAAAAAAAAAAAA",
		admin.AuxWaiters: ks.Waiters, admin.AuxTombs: ks.Tombs,
		admin.AuxReaders: base + ":readers", admin.AuxHolds: base + ":holds",
		admin.AuxPermits: base + ":permits", admin.AuxLimit: base + ":limit",
		admin.AuxLimitVer: base + ":limitver",
		admin.AuxCount:    base + ":count", admin.AuxSegments: base + ":segments",
		admin.AuxGuard:  fenced.GuardKey(key),
		admin.AuxLeader: base + ":leader", admin.AuxElected: base + ":elected",
	}
}

// A lock key that is another lock's auxiliary key (its readers, queue,
// fence...) is refused by every call before any Redis command: before,
// a lock on "dlock:{orders}:readers" was granted and then deleted by the
// first reader of "orders".
func TestReservedKeysRefused(t *testing.T) {
	ctx := context.Background()
	var rt roundTrips
	rdb := srv.NewClient()
	rdb.AddHook(&rt)
	c, _ := newClientOn(t, rdb, dlock.Options{})
	for _, lock := range []string{"orders", "user:{42}:lock", "a}b{", key(t)} {
		for kind, name := range auxNames(adminOf(t, c), lock) {
			if k, got, ok := adminOf(t, c).AuxKeyOf(name); !ok || k != lock || got != kind {
				t.Errorf("AuxKeyOf(%q) = %q, %q, %v; want %q, %q", name, k, got, ok, lock, kind)
			}
			calls := map[string]func() error{
				"Lock":    func() error { _, err := c.Lock(ctx, name); return err },
				"TryLock": func() error { _, err := c.TryLock(ctx, name); return err },
				"Shared":  func() error { _, err := c.RWLock(name).TryRLock(ctx); return err },
				"Reentrant": func() error {
					_, err := c.Reentrant(name).TryLock(ctx, "job-1")
					return err
				},
				"Semaphore": func() error { _, err := c.Semaphore(name, 2).TryAcquire(ctx, 1); return err },
				"SetLimit":  func() error { return c.Semaphore(name, 1).SetLimit(ctx, 2) },
				"LockMulti": func() error { _, err := c.TryLockMulti(ctx, []string{"free-" + lock, name}); return err },
				"Inspect":   func() error { _, err := adminOf(t, c).Inspect(ctx, name); return err },
				"ForceRelease": func() error {
					_, err := adminOf(t, c).ForceRelease(ctx, name)
					return err
				},
				"ReleaseToken": func() error { return adminOf(t, c).ReleaseToken(ctx, name, "tok") },
			}
			for call, f := range calls {
				before := rt.n.Load()
				err := f()
				if !errors.Is(err, dlock.ErrReservedKey) || !errors.Is(err, dlock.ErrInvalidArgument) {
					t.Fatalf("%s(%q), the %s of %q: err %v, want ErrReservedKey", call, name, kind, lock, err)
				}
				if !strings.Contains(err.Error(), string(kind)) || !strings.Contains(err.Error(), lock) {
					t.Errorf("%s(%q): error %q does not name the kind and the lock", call, name, err)
				}
				if n := rt.n.Load() - before; n != 0 {
					t.Errorf("%s(%q): %d Redis round trips before refusing", call, name, n)
				}
			}
		}
	}
	// The lock keys themselves, and names dlock never derives, are fine.
	for _, k := range []string{"orders", "dlock:orders:fence", "dlock:{orders}:fence:x", "dlock:{orders}:q:short", "other:{orders}:fence"} {
		lk, err := c.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock(%q): %v", k, err)
		}
		_ = lk.Unlock(ctx)
	}
}

// Prefixes that would let two (prefix, key) pairs share auxiliary names
// are refused: prefix "dlock:#x" with key "t" named exactly the fence and
// queue of the default prefix's lock on "x:{t}".
func TestPrefixAliasRefused(t *testing.T) {
	def, err := dlock.New(srv.NewClient(), dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	for _, p := range []string{"dlock:#x", "#", "a{b", "a}b", "x:{y}"} {
		c, err := dlock.New(srv.NewClient(), dlock.Options{Prefix: p})
		if err == nil {
			a, b := adminOf(t, c).KeysFor("t"), adminOf(t, def).KeysFor("x:{t}")
			_ = c.Close()
			t.Fatalf("prefix %q accepted (its fence for t %q, the default's for x:{t} %q)", p, a.Fence, b.Fence)
		}
		if !errors.Is(err, dlock.ErrInvalidOpts) || !strings.Contains(err.Error(), p) {
			t.Errorf("prefix %q: err %v, want ErrInvalidOpts naming it", p, err)
		}
	}
}

// List finds the locks of a Client whose prefix has glob characters: they
// are escaped in its SCAN pattern (before, "p[x]" matched nothing).
func TestListGlobPrefix(t *testing.T) {
	ctx := context.Background()
	for _, p := range []string{"p[x]", "p*", `p\q`, "p?"} {
		c, _ := newClient(t, dlock.Options{Prefix: p})
		k := key(t)
		lk, err := c.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		if err := adminOf(t, c).List(ctx, "", func(i admin.Info) bool { // "": the fence scan alone
			found = found || i.Key == k
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if !found {
			t.Errorf("prefix %q: List does not show the held lock %q", p, k)
		}
		_ = lk.Unlock(ctx)
	}
}

// Every key dlock creates, for every kind of lock, with waiters queued and
// one given up (its tombstone), is either a lock key or decodes with
// AuxKeyOf to its lock: the one table of suffixes misses no name.
func TestEveryKeyDecodes(t *testing.T) {
	ctx := context.Background()
	const prefix = "evk"
	c, rdb := newClient(t, dlock.Options{Prefix: prefix})
	locks := map[string]bool{}
	lk := func(k string, kind primitive) {
		t.Helper()
		locks[k] = true
		l, err := kind.TryLock(ctx, c, k)
		if err != nil {
			t.Fatalf("TryLock(%q): %v", k, err)
		}
		t.Cleanup(func() { _ = l.Unlock(context.Background()) })
	}
	// queue puts a waiter on k (with opts) and waits until it is queued;
	// if giveUp, the waiter then gives up, leaving its tombstone.
	queue := func(k string, giveUp bool, kind primitive) {
		t.Helper()
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if l, err := kind.Lock(wctx, c, k); err == nil {
				_ = l.Unlock(context.Background())
			}
		}()
		for deadline := time.Now().Add(30 * time.Second); rdb.LLen(ctx, adminOf(t, c).KeysFor(k).Queue).Val() == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no waiter queued on %q", k)
			}
		}
		if giveUp {
			cancel()
			<-done
			return
		}
		t.Cleanup(func() { cancel(); <-done })
	}
	ex, sh, re, sem, odd, tagged := "evkL:ex", "evkL:sh", "evkL:re", "evkL:sem", "evkL:a}b{", "evkL:{t}x"
	lk(ex, nil)
	queue(ex, false, nil)
	queue(ex, true, nil)
	lk(sh, readers())
	queue(sh, false, nil)
	lk(re, reentrant("job-1"))
	if err := c.Semaphore(sem, 1).SetLimit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	lk(sem, permits(2, 1))
	queue(sem, false, permits(2, 1))
	lk(odd, nil)
	lk(tagged, nil)
	stock := c.Counter("evkL:stock", 2)
	if err := stock.Set(ctx, 3); err != nil {
		t.Fatal(err)
	}
	locks["evkL:stock:0"], locks["evkL:stock:1"] = true, true
	if err := fenced.Set(ctx, rdb, "evkL:res", 1, "me", "v"); err != nil {
		t.Fatal(err)
	}
	locks["evkL:res"] = true
	el := c.Election("evkL:elect", dlock.ElectionOptions{})
	leader, err := el.Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = leader.Resign(context.Background()) })
	locks["evkL:elect"] = true
	t.Cleanup(func() {
		rdb.Del(context.Background(), "evkL:res", fenced.GuardKey("evkL:res"), adminOf(t, c).KeysFor("evkL:stock:0").Fence)
	})

	var names []string
	for _, pattern := range []string{prefix + "*", fenced.GuardKey("evkL:res")} {
		iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			names = append(names, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
	}
	kinds := map[admin.AuxKind]int{}
	for _, name := range names {
		if locks[name] {
			continue
		}
		k, kind, ok := adminOf(t, c).AuxKeyOf(name)
		if !ok || !locks[k] {
			t.Errorf("key %q (type %s) is neither a lock key nor decodes to one: %q, %q, %v", name, rdb.Type(ctx, name).Val(), k, kind, ok)
			continue
		}
		kinds[kind]++
	}
	for _, kind := range []admin.AuxKind{admin.AuxFence, admin.AuxQueue, admin.AuxWaiters, admin.AuxTombs, admin.AuxReaders,
		admin.AuxHolds, admin.AuxPermits, admin.AuxLimit, admin.AuxLimitVer, admin.AuxCount, admin.AuxSegments, admin.AuxGuard,
		admin.AuxLeader} {
		if kinds[kind] == 0 {
			t.Errorf("no %s key seen (kinds seen: %v)", kind, kinds)
		}
	}
}
