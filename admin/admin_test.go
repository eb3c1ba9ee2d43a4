package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/redis/go-redis/v9"
)

// An owner id, SharedValue or any other stored value is never a release
// credential: only a handle's own token releases it, for every kind.
func TestReleaseTokenEveryKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, adm, _ := newClient(t, dlock.Options{})
	ttl := dlock.WithTTL(30 * time.Second)

	type kind struct {
		name  string
		take  primitive
		bogus []string // values that must not release it
	}
	for _, k := range []kind{
		{"reentrant", reentrant("job-42"), []string{"job-42", admin.ReentrantPrefix + "job-42"}},
		{"shared", readers(), []string{admin.SharedValue}},
		{"semaphore", permits(3, 1), []string{"job-42"}},
		{"plain", nil, []string{"job-42"}},
	} {
		t.Run(k.name, func(t *testing.T) {
			key := key(t)
			a, err := k.take.TryLock(ctx, c, key, ttl)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Unlock(ctx)
			var b *dlock.Lock
			if k.name != "plain" {
				if b, err = k.take.TryLock(ctx, c, key, ttl); err != nil {
					t.Fatal(err)
				}
				defer b.Unlock(ctx)
			}
			for _, v := range k.bogus {
				err := adm.ReleaseToken(ctx, key, v)
				if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrTaken) {
					t.Errorf("ReleaseToken(%q) = %v; want ErrNotHeld and ErrTaken", v, err)
				}
			}
			if info, err := adm.Inspect(ctx, key); err != nil || !info.Held {
				t.Fatalf("after ReleaseToken of a non-token: %+v, %v; want still held", info, err)
			}
			if err := a.Extend(ctx, 30*time.Second); err != nil {
				t.Fatalf("handle a after bogus releases: %v", err)
			}
			// The handle's own token releases that handle (only).
			if err := adm.ReleaseToken(ctx, key, a.Token()); err != nil {
				t.Fatalf("ReleaseToken(a.Token()) = %v", err)
			}
			if err := a.Extend(ctx, 30*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("a.Extend after its release: %v; want ErrNotHeld", err)
			}
			if b != nil {
				if err := b.Extend(ctx, 30*time.Second); err != nil {
					t.Errorf("the other handle b after a's release: %v", err)
				}
				if err := adm.ReleaseToken(ctx, key, b.Token()); err != nil {
					t.Fatalf("ReleaseToken(b.Token()) = %v", err)
				}
			}
			if info, err := adm.Inspect(ctx, key); err != nil || info.Held {
				t.Errorf("after releasing every handle: %+v, %v; want free", info, err)
			}
			if err := adm.ReleaseToken(ctx, key, a.Token()); !errors.Is(err, dlock.ErrExpired) {
				t.Errorf("ReleaseToken of a free key = %v; want ErrExpired", err)
			}
		})
	}
}

// ForceRelease steals every kind of lock, and its holders find out.
func TestForceReleaseEveryKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, adm, _ := newClient(t, dlock.Options{})
	for _, take := range []primitive{reentrant("job-7"), readers(), permits(2, 1), nil} {
		key := key(t)
		a, err := take.TryLock(ctx, c, key, dlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ok, err := adm.ForceRelease(ctx, key)
		if !ok || err != nil {
			t.Fatalf("ForceRelease(%s) = %v, %v", key, ok, err)
		}
		if info, err := adm.Inspect(ctx, key); err != nil || info.Held {
			t.Errorf("after ForceRelease: %+v, %v; want free", info, err)
		}
		if err := a.Extend(ctx, 30*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("holder's Extend after ForceRelease: %v; want ErrNotHeld", err)
		}
		_ = a.Unlock(ctx)
	}
}

// Admin knows dlock's own auxiliary keys: List shows them under their lock,
// never as locks, and ForceRelease refuses them.
func TestAdminAuxKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, adm, rdb := newClient(t, dlock.Options{})
	sem := key(t)
	if err := c.Semaphore(sem, 1).SetLimit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	lk, err := c.Semaphore(sem, 5).TryAcquire(ctx, 1, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(ctx)
	cnt := c.Counter(key(t), 2)
	if err := cnt.Set(ctx, 10); err != nil {
		t.Fatal(err)
	}
	ks := adm.KeysFor(sem)
	limitKey := strings.TrimSuffix(ks.Fence, ":fence") + ":limit"
	if n, _ := rdb.Exists(ctx, limitKey).Result(); n != 1 {
		t.Fatalf("no limit key %s", limitKey)
	}
	var countKey string
	keys, _ := rdb.Keys(ctx, "dlock:*:count").Result()
	for _, k := range keys {
		if strings.Contains(k, t.Name()) {
			countKey = k
		}
	}
	if countKey == "" {
		t.Fatalf("no Counter key among %v", keys)
	}

	found := map[string]admin.Info{}
	if err := adm.List(ctx, "*"+t.Name()+"*", func(i admin.Info) bool { found[i.Key] = i; return true }); err != nil {
		t.Fatal(err)
	}
	for k, i := range found {
		if strings.HasPrefix(k, "dlock:") || i.Kind == admin.KindForeign {
			t.Errorf("List shows %q as a lock: %+v", k, i)
		}
	}
	if i, ok := found[sem]; !ok || i.Kind != admin.KindSemaphore || !contains(i.Aux, limitKey) {
		t.Errorf("List: semaphore %q: %+v (found %v); want it, with %s among its Aux", sem, i, ok, limitKey)
	}

	for _, aux := range []string{limitKey, countKey, ks.Fence, ks.Queue} {
		ok, err := adm.ForceRelease(ctx, aux)
		if ok || !errors.Is(err, dlock.ErrReservedKey) {
			t.Errorf("ForceRelease(%s) = %v, %v; want ErrReservedKey", aux, ok, err)
		}
		if err := adm.ReleaseToken(ctx, aux, "2"); !errors.Is(err, dlock.ErrReservedKey) {
			t.Errorf("ReleaseToken(%s) = %v; want ErrReservedKey", aux, err)
		}
	}
	if v, _ := rdb.Get(ctx, limitKey).Result(); v != "2" {
		t.Errorf("limit key after ForceRelease: %q; want 2", v)
	}
	if n, _ := rdb.Exists(ctx, countKey).Result(); n != 1 {
		t.Errorf("Counter key deleted by ForceRelease")
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// New refuses what dlock.New refuses of the options it shares, with the
// same errors, and fills in dlock's defaults.
func TestNewOptions(t *testing.T) {
	t.Parallel()
	rdb := srv.Client(t)
	var nilClient *redis.Client
	for name, tc := range map[string]struct {
		rdb  redis.UniversalClient
		opts admin.Options
		want error
	}{
		"nil client":       {nil, admin.Options{}, dlock.ErrNilClient},
		"typed nil client": {nilClient, admin.Options{}, dlock.ErrNilClient},
		"prefix with {":    {rdb, admin.Options{Prefix: "a{b"}, dlock.ErrInvalidOpts},
		"prefix with #":    {rdb, admin.Options{Prefix: "dlock:#x"}, dlock.ErrInvalidOpts},
		"negative pickup":  {rdb, admin.Options{PickupTimeout: -time.Second}, dlock.ErrInvalidOpts},
	} {
		if _, err := admin.New(tc.rdb, tc.opts); !errors.Is(err, tc.want) || !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: New = %v; want %v", name, err, tc.want)
		}
	}
	adm, err := admin.New(rdb, admin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, _, _ := newClient(t, dlock.Options{})
	if got, o := adm.Options(), c.Options(); got.Prefix != o.Prefix || got.PickupTimeout != o.PickupTimeout {
		t.Errorf("Options() = %+v; want dlock's defaults %q, %v", got, o.Prefix, o.PickupTimeout)
	}
	//lint:ignore SA1012 a nil ctx is the input under test
	if _, err := adm.Inspect(nil, "k"); !errors.Is(err, dlock.ErrNilContext) {
		t.Errorf("Inspect(nil ctx) = %v; want ErrNilContext", err)
	}
}
