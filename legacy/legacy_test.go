package legacy_test

//lint:file-ignore SA1019 older clients take the lock with GETSET; these tests speak it on the wire as they do

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/legacy"
	"github.com/redis/go-redis/v9"
)

var units = []legacy.Unit{legacy.Seconds, legacy.Milliseconds}

// TestValueFormat: the key holds now+timeout+1 in the unit, timeout being
// the TTL rounded up to the unit (at least one), without a Redis TTL; the
// grant has no fence.
func TestValueFormat(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_700_000_000, 900_000_000)
	fixed := func() time.Time { return at }
	cases := []struct {
		unit legacy.Unit
		ttl  time.Duration
		want string
	}{
		{legacy.Seconds, 3 * time.Second, "1700000004"}, // seed 004: now + 3 + 1
		{legacy.Seconds, 1500 * time.Millisecond, "1700000003"},
		{legacy.Seconds, 200 * time.Millisecond, "1700000002"}, // below 1s: 1s
		{legacy.Seconds, 999 * time.Millisecond, "1700000002"},
		{legacy.Milliseconds, 40 * time.Millisecond, "1700000000941"},    // seed 000: now + 40 + 1
		{legacy.Milliseconds, 50500 * time.Microsecond, "1700000000952"}, // rounded up to 51ms
		{legacy.Milliseconds, 2 * time.Second, "1700000002901"},
	}
	c, rdb := newDlock(t, dlock.Options{})
	for _, tc := range cases {
		k := key(t)
		p := legacy.New(legacy.Options{Unit: tc.unit, Clock: fixed})
		lk, err := c.TryLock(t.Context(), k, with(p, tc.ttl, dlock.WithoutRenewal())...)
		if err != nil {
			t.Fatal(err)
		}
		if got := rdb.Get(t.Context(), k).Val(); got != tc.want || lk.Token() != tc.want {
			t.Errorf("%v ttl %v: stored %q, Token %q, want %q", tc.unit, tc.ttl, got, lk.Token(), tc.want)
		}
		if ttl := rdb.TTL(t.Context(), k).Val(); ttl != -1 {
			t.Errorf("the key has a Redis TTL (%v); the seeds set none", ttl)
		}
		if lk.Fence() != 0 {
			t.Errorf("Fence = %d, want 0", lk.Fence())
		}
		// Unlock may find a short lease over already and report it lost.
		if err := lk.Unlock(t.Context()); err != nil && !errors.Is(err, dlock.ErrLost) {
			t.Fatal(err)
		}
		rdb.Del(t.Context(), k)
	}
	// The zero value is the default protocol: seconds, real clock.
	k := key(t)
	lk, err := c.TryLock(t.Context(), k, with(&legacy.Protocol{}, time.Second)...)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Get(t.Context(), k).Int64(); n-time.Now().Unix() < 1 || n-time.Now().Unix() > 2 {
		t.Errorf("zero Protocol stored %d, now %d", n, time.Now().Unix())
	}
	lk.Unlock(t.Context())
}

// TestWireCommands: an acquire attempt speaks exactly the seeds' commands.
func TestWireCommands(t *testing.T) {
	t.Parallel()
	for _, u := range units {
		t.Run(u.String(), func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			c, rdb := newDlock(t, dlock.Options{})
			rdb.AddHook(rec)
			admin := newRDB(t)
			p := legacy.New(legacy.Options{Unit: u})
			k := key(t)

			// Free key: SETNX wins.
			lk, err := c.TryLock(t.Context(), k, with(p, time.Second)...)
			if err != nil {
				t.Fatal(err)
			}
			if got := rec.take(); !slices.Equal(got, []string{"setnx"}) {
				t.Errorf("free key: sent %v, want [setnx]", got)
			}
			if err := lk.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := rec.take(); !slices.Equal(got, []string{"evalsha"}) {
				t.Errorf("release: sent %v, want one script call", got)
			}

			// Held (not expired): SETNX, GET; NotAcquiredError has the time left.
			unit, ahead := time.Second, int64(100)
			if u == legacy.Milliseconds {
				unit, ahead = time.Millisecond, 10_000
			}
			held := stamp(u) + ahead
			admin.Set(t.Context(), k, held, 0)
			_, err = c.TryLock(t.Context(), k, with(p, time.Second)...)
			var na *dlock.NotAcquiredError
			if !errors.As(err, &na) {
				t.Fatalf("held key: TryLock = %v, want *NotAcquiredError", err)
			}
			if want := time.Duration(ahead) * unit; na.TTL < want-time.Second || na.TTL > want+unit {
				t.Errorf("held key: TTL %v, want about %v", na.TTL, want)
			}
			if got := rec.take(); !slices.Equal(got, []string{"setnx", "get"}) {
				t.Errorf("held key: sent %v, want [setnx get]", got)
			}
			if v, _ := admin.Get(t.Context(), k).Int64(); v != held {
				t.Errorf("held key changed to %d", v)
			}

			// Expired: SETNX, GET, the takeover script wins.
			admin.Set(t.Context(), k, stamp(u)-1, 0)
			lk, err = c.TryLock(t.Context(), k, with(p, time.Second)...)
			if err != nil {
				t.Fatalf("expired key: %v", err)
			}
			if got := rec.take(); !slices.Equal(got, []string{"setnx", "get", "evalsha"}) {
				t.Errorf("expired key: sent %v, want [setnx get evalsha]", got)
			}
			if got := admin.Get(t.Context(), k).Val(); got != lk.Token() {
				t.Errorf("after takeover the key holds %q, lock %q", got, lk.Token())
			}
			lk.Unlock(t.Context())
		})
	}
}

// TestKeyVanishesBeforeGet: SETNX fails, the holder releases before our GET.
// The attempt sends SETNX again rather than GETSET (which could overwrite a
// newcomer).
func TestKeyVanishesBeforeGet(t *testing.T) {
	t.Parallel()
	p := legacy.New(legacy.Options{Unit: legacy.Milliseconds})
	for _, newcomer := range []bool{false, true} {
		rec := &recorder{}
		c, rdb := newDlock(t, dlock.Options{})
		rdb.AddHook(rec)
		admin := newRDB(t)
		k := key(t)
		admin.Set(t.Context(), k, stamp(legacy.Milliseconds)+60_000, 0)
		other := strconv.FormatInt(stamp(legacy.Milliseconds)+30_000, 10)
		rec.setAfter(func(ctx context.Context, cmd redis.Cmder) {
			switch cmd.Name() {
			case "setnx":
				rec.setAfter(nil)
				admin.Del(ctx, k) // the holder releases
				if newcomer {
					rec.setAfter(func(ctx context.Context, cmd redis.Cmder) {
						if cmd.Name() == "get" {
							rec.setAfter(nil)
							admin.Do(ctx, "SETNX", k, other) // someone else gets in first
						}
					})
				}
			}
		})
		lk, err := c.TryLock(t.Context(), k, with(p, time.Second)...)
		if got := rec.take(); !slices.Equal(got, []string{"setnx", "get", "setnx"}) {
			t.Errorf("newcomer=%v: sent %v, want [setnx get setnx]", newcomer, got)
		}
		if !newcomer {
			if err != nil {
				t.Fatalf("vanished key: %v", err)
			}
			if admin.Get(t.Context(), k).Val() != lk.Token() {
				t.Error("key does not hold the lock's value")
			}
			lk.Unlock(t.Context())
			continue
		}
		var na *dlock.NotAcquiredError
		if !errors.As(err, &na) || na.TTL != 0 {
			t.Fatalf("newcomer: TryLock = %v, want NotAcquiredError with TTL 0 (retry at once)", err)
		}
		if admin.Get(t.Context(), k).Val() != other {
			t.Error("the newcomer's lock was overwritten")
		}
	}
}

// TestGetSetRace drives the takeover race deterministically: between our
// GET (which saw the lock expired) and our takeover, another client does
// something.
func TestGetSetRace(t *testing.T) {
	t.Parallel()
	u := legacy.Milliseconds
	p := legacy.New(legacy.Options{Unit: u})
	ttl := time.Second // our value: now + 1001

	setup := func(t *testing.T, between func(ctx context.Context, admin *redis.Client, k string)) (*dlock.Client, *recorder, *redis.Client, string) {
		rec := &recorder{}
		c, rdb := newDlock(t, dlock.Options{})
		rdb.AddHook(rec)
		admin := newRDB(t)
		k := key(t)
		admin.Set(t.Context(), k, stamp(u)-5, 0) // a dead holder's expired lock
		rec.setAfter(func(ctx context.Context, cmd redis.Cmder) {
			if cmd.Name() == "get" {
				rec.setAfter(nil)
				between(ctx, admin, k)
			}
		})
		return c, rec, admin, k
	}

	// Another client's GETSET wins between our GET and our takeover: the
	// takeover finds the winner's value and writes nothing, whether the
	// winner's value is later than ours or earlier (where a GETSET of ours
	// would have moved the claim).
	for name, ahead := range map[string]int64{"LaterWinnerKept": 5000, "EarlierWinnerKept": 300} {
		t.Run(name, func(t *testing.T) {
			// The winner's stamp is taken when it wins, and the time left
			// judged against the time since: starting the servers or a
			// loaded machine must not eat into it.
			var winner string
			var won time.Time
			c, rec, admin, k := setup(t, func(ctx context.Context, admin *redis.Client, k string) {
				winner, won = strconv.FormatInt(stamp(u)+ahead, 10), time.Now()
				admin.GetSet(ctx, k, winner)
			})
			_, err := c.TryLock(t.Context(), k, with(p, ttl)...)
			var na *dlock.NotAcquiredError
			if !errors.As(err, &na) || na.TTL < time.Duration(ahead-100)*time.Millisecond-time.Since(won) {
				t.Fatalf("TryLock = %v, want NotAcquiredError with the winner's time left", err)
			}
			if got := withoutScripts(rec.take()); !slices.Equal(got, []string{"setnx", "get"}) {
				t.Errorf("sent %v, want [setnx get] and the takeover script", got)
			}
			if got := admin.Get(t.Context(), k).Val(); got != winner {
				t.Errorf("key holds %q, want the winner's %q", got, winner)
			}
		})
	}
	t.Run("DeletedMeanwhile", func(t *testing.T) {
		// The takeover finds the key gone and sets it, like SETNX.
		c, _, admin, k := setup(t, func(ctx context.Context, admin *redis.Client, k string) {
			admin.Del(ctx, k)
		})
		lk, err := c.TryLock(t.Context(), k, with(p, ttl)...)
		if err != nil {
			t.Fatal(err)
		}
		if admin.Get(t.Context(), k).Val() != lk.Token() {
			t.Error("key does not hold the lock's value")
		}
		if err := lk.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("ForeignValueMeanwhile", func(t *testing.T) {
		// A token lock appears between GET and the takeover: it is left
		// alone, and we do not claim the lock.
		c, _, admin, k := setup(t, func(ctx context.Context, admin *redis.Client, k string) {
			admin.Set(ctx, k, "a-token-lock-holder", time.Minute)
		})
		_, err := c.TryLock(t.Context(), k, with(p, ttl)...)
		if !errors.Is(err, legacy.ErrNotTimestamp) {
			t.Fatalf("TryLock = %v, want ErrNotTimestamp", err)
		}
		if got := admin.Get(t.Context(), k).Val(); got != "a-token-lock-holder" {
			t.Errorf("the token lock's value was replaced by %q", got)
		}
	})
	t.Run("TwoContenders", func(t *testing.T) {
		// Two dlock contenders: the second one's takeover lands after the
		// first one won. The winner must keep a working lock: renewals
		// and release succeed (the loser wrote nothing).
		admin := newRDB(t)
		k := key(t)
		admin.Set(t.Context(), k, stamp(u)-5, 0)
		c1, _ := newDlock(t, dlock.Options{})
		rec := &recorder{}
		c2, rdb2 := newDlock(t, dlock.Options{})
		rdb2.AddHook(rec)
		won := make(chan *dlock.Lock, 1)
		rec.setAfter(func(ctx context.Context, cmd redis.Cmder) {
			if cmd.Name() == "get" {
				rec.setAfter(nil)
				lk, err := c1.TryLock(ctx, k, with(p, ttl)...) // wins the race
				if err != nil {
					t.Error(err)
				}
				won <- lk
			}
		})
		_, err := c2.TryLock(t.Context(), k, with(p, ttl)...)
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("loser: %v", err)
		}
		lk := <-won
		if lk == nil {
			t.FailNow()
		}
		if err := lk.Extend(t.Context(), ttl); err != nil {
			t.Fatalf("winner's renewal: %v", err)
		}
		if err := lk.Unlock(t.Context()); err != nil {
			t.Fatalf("winner's release: %v", err)
		}
	})
}

// TestAmbiguousAcquire: a SETNX whose reply is lost may have written the
// key; the engine deletes it (compare-and-delete) so nobody waits for a
// lock that nobody holds. A takeover whose reply is lost is not
// compensated: its value may be another client's too.
func TestAmbiguousAcquire(t *testing.T) {
	t.Parallel()
	p := legacy.New(legacy.Options{Unit: legacy.Milliseconds})
	injected := errors.New("injected: connection reset after the command ran")

	rec := &recorder{}
	c, rdb := newDlock(t, dlock.Options{})
	rdb.AddHook(rec)
	admin := newRDB(t)
	k := key(t)
	rec.setAfter(func(_ context.Context, cmd redis.Cmder) {
		if cmd.Name() == "setnx" {
			rec.setAfter(nil)
			cmd.SetErr(injected)
		}
	})
	_, err := c.Lock(t.Context(), k, with(p, time.Minute)...)
	if !errors.Is(err, dlock.ErrUnavailable) || !errors.Is(err, injected) {
		t.Fatalf("Lock = %v, want ErrUnavailable wrapping the injected error", err)
	}
	// The value is not unique to the attempt (another client may hold the
	// same one): nothing is undone, it expires like a crashed holder's.
	time.Sleep(50 * time.Millisecond)
	if n, _ := admin.Get(t.Context(), k).Int64(); n <= stamp(legacy.Milliseconds) {
		t.Fatalf("after an ambiguous SETNX the key holds %d; want our value left to expire", n)
	}

	k = key(t)
	admin.Set(t.Context(), k, stamp(legacy.Milliseconds)-5, 0)
	rec.setAfter(func(_ context.Context, cmd redis.Cmder) {
		// The takeover script's run (not a NOSCRIPT reply before it).
		if n := cmd.Name(); (n == "evalsha" || n == "eval") && cmd.Err() == nil {
			rec.setAfter(nil)
			cmd.SetErr(injected)
		}
	})
	_, err = c.Lock(t.Context(), k, with(p, time.Second)...)
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Lock = %v, want ErrUnavailable", err)
	}
	time.Sleep(50 * time.Millisecond)
	if n, _ := admin.Get(t.Context(), k).Int64(); n <= stamp(legacy.Milliseconds) {
		t.Fatalf("after an ambiguous takeover the key holds %d; want our value left to expire", n)
	}
}

// TestStaleRelease: a holder paused past its timeout (as other clients see
// it) must not delete the new holder's lock.
func TestStaleRelease(t *testing.T) {
	t.Parallel()
	t.Run("TakenOverBeforeOwnDeadline", func(t *testing.T) {
		// B's clock runs 2s ahead, so to B the lock of A (1s) has expired:
		// it takes it over while A's own deadline has not passed. A then
		// releases: the release script finds B's value and leaves it.
		t.Parallel()
		ca, admin := newDlock(t, dlock.Options{})
		cb, _ := newDlock(t, dlock.Options{})
		k := key(t)
		pa := legacy.New(legacy.Options{Unit: legacy.Milliseconds})
		pb := legacy.New(legacy.Options{Unit: legacy.Milliseconds, Clock: skewed(2 * time.Second)})
		lkA, err := ca.Lock(t.Context(), k, with(pa, time.Second, dlock.WithoutRenewal())...)
		if err != nil {
			t.Fatal(err)
		}
		lkB, err := cb.TryLock(t.Context(), k, with(pb, 5*time.Second)...)
		if err != nil {
			t.Fatalf("B with a fast clock did not take over: %v", err)
		}
		if time.Now().After(lkA.Deadline()) {
			t.Fatal("test too slow: A's deadline passed")
		}
		err = lkA.Unlock(t.Context())
		if !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrTaken) {
			t.Fatalf("stale Unlock = %v, want ErrLost+ErrTaken", err)
		}
		if got := admin.Get(t.Context(), k).Val(); got != lkB.Token() {
			t.Fatalf("key holds %q, want B's %q", got, lkB.Token())
		}
		if err := lkB.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("PausedPastDeadline", func(t *testing.T) {
		// A does not renew and overruns; a seed client takes over after
		// the stored expiry; A's late Unlock reports the loss and deletes
		// nothing.
		t.Parallel()
		ca, admin := newDlock(t, dlock.Options{})
		k := key(t)
		pa := legacy.New(legacy.Options{Unit: legacy.Milliseconds})
		lkA, err := ca.Lock(t.Context(), k, with(pa, 50*time.Millisecond, dlock.WithoutRenewal())...)
		if err != nil {
			t.Fatal(err)
		}
		seed := &csharpClient{rdb: newRDB(t), key: k, timeout: 40, sleep: 30 * time.Millisecond}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if ok, err := seed.lock(ctx); !ok {
			t.Fatalf("seed client did not take over: %v", err)
		}
		taken := admin.Get(t.Context(), k).Val()
		err = lkA.Unlock(t.Context())
		if !errors.Is(err, dlock.ErrLost) {
			t.Fatalf("late Unlock = %v, want ErrLost", err)
		}
		if got := admin.Get(t.Context(), k).Val(); got != taken {
			t.Fatalf("the new holder's lock was touched: %q, want %q", got, taken)
		}
	})
}

// TestBadValues: values that are not this protocol's timestamps.
func TestBadValues(t *testing.T) {
	t.Parallel()
	const (
		notTS    = "not a timestamp"
		takeover = "expired: taken over"
		held     = "held until its time"
	)
	cases := []struct {
		name  string
		value func(u legacy.Unit) string
		want  string
	}{
		{"word", fixed("locked"), notTS},
		{"empty", fixed(""), notTS},
		{"float", fixed("1712345678.5"), notTS},
		{"hex", fixed("0x1f"), notTS},
		{"token", fixed("Zm9vYmFyYmF6cXV4cXV1eA"), notTS}, // a dlock token on the same key
		{"zero", fixed("0"), takeover},
		{"negative", fixed("-12"), takeover},
		{"padded", fixed(" 17 "), takeover}, // Python int() and C# long.Parse accept it
		{"hugely-negative", fixed("-99999999999999999999999"), takeover},
		{"huge", fixed("99999999999999999999999"), held},
		{"far-future", func(u legacy.Unit) string { return strconv.FormatInt(stamp(u)*10, 10) }, held},
	}
	for _, u := range units {
		for _, tc := range cases {
			t.Run(u.String()+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				c, _ := newDlock(t, dlock.Options{RetryInterval: 20 * time.Millisecond})
				admin := newRDB(t)
				p := legacy.New(legacy.Options{Unit: u})
				k := key(t)
				v := tc.value(u)
				admin.Set(t.Context(), k, v, 0)
				switch tc.want {
				case notTS:
					_, err := c.TryLock(t.Context(), k, with(p, time.Second)...)
					if !errors.Is(err, legacy.ErrNotTimestamp) || !errors.Is(err, dlock.ErrWrongType) {
						t.Fatalf("TryLock = %v, want ErrNotTimestamp (and ErrWrongType)", err)
					}
					if len(v) > 6 && strings.Contains(err.Error(), v) {
						t.Errorf("error discloses the whole value: %v", err)
					}
					// Lock does not wait on it.
					start := time.Now()
					_, err = c.Lock(t.Context(), k, with(p, time.Second)...)
					if !errors.Is(err, legacy.ErrNotTimestamp) || time.Since(start) > time.Second {
						t.Fatalf("Lock = %v after %v, want ErrNotTimestamp at once", err, time.Since(start))
					}
				case takeover:
					lk, err := c.TryLock(t.Context(), k, with(p, time.Second)...)
					if err != nil {
						t.Fatalf("TryLock = %v, want the lock", err)
					}
					if got := admin.Get(t.Context(), k).Val(); got != lk.Token() {
						t.Fatalf("key holds %q, lock %q", got, lk.Token())
					}
					if err := lk.Unlock(t.Context()); err != nil {
						t.Fatal(err)
					}
					return
				case held:
					_, err := c.TryLock(t.Context(), k, with(p, time.Second)...)
					var na *dlock.NotAcquiredError
					if !errors.As(err, &na) || na.TTL < 24*time.Hour {
						t.Fatalf("TryLock = %v, want NotAcquiredError far in the future", err)
					}
					ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
					defer cancel()
					_, err = c.Lock(ctx, k, with(p, time.Second)...)
					if !errors.Is(err, dlock.ErrContextDone) || !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("Lock = %v, want ErrContextDone", err)
					}
				}
				if got := admin.Get(t.Context(), k).Val(); got != v {
					t.Fatalf("key changed from %q to %q", v, got)
				}
				if tc.want == held {
					// The way out: an operator's forced release.
					if ok, err := adminOn(t, admin).ForceRelease(t.Context(), k); !ok || err != nil {
						t.Fatalf("ForceRelease = %v, %v", ok, err)
					}
					lk, err := c.TryLock(t.Context(), k, with(p, time.Second)...)
					if err != nil {
						t.Fatalf("after ForceRelease: %v", err)
					}
					lk.Unlock(t.Context())
				}
			})
		}
	}
}

func fixed(v string) func(legacy.Unit) string { return func(legacy.Unit) string { return v } }

// TestMixedUnits documents why clients of one key must agree on the unit:
// a seconds timestamp is long expired to a milliseconds client.
func TestMixedUnits(t *testing.T) {
	t.Parallel()
	c, _ := newDlock(t, dlock.Options{})
	k := key(t)
	sec := legacy.New(legacy.Options{Unit: legacy.Seconds})
	ms := legacy.New(legacy.Options{Unit: legacy.Milliseconds})
	lk, err := c.TryLock(t.Context(), k, with(sec, time.Minute)...)
	if err != nil {
		t.Fatal(err)
	}
	lk2, err := c.TryLock(t.Context(), k, with(ms, time.Minute)...)
	if err != nil {
		t.Fatalf("a milliseconds client should (wrongly) take a seconds lock over: %v", err)
	}
	// And a seconds client sees a milliseconds lock as held for millennia.
	_, err = c.TryLock(t.Context(), k, with(sec, time.Minute)...)
	var na *dlock.NotAcquiredError
	if !errors.As(err, &na) || na.TTL < 200*365*24*time.Hour {
		t.Fatalf("TryLock = %v", err)
	}
	if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrTaken) {
		t.Fatalf("Unlock of the overrun lock = %v", err)
	}
	if err := lk2.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestWrongType: a key that is not a string is not a lock.
func TestWrongType(t *testing.T) {
	t.Parallel()
	c, admin := newDlock(t, dlock.Options{})
	p := legacy.New(legacy.Options{})
	k := key(t)
	admin.RPush(t.Context(), k, "x")
	_, err := c.TryLock(t.Context(), k, with(p, time.Second)...)
	if !errors.Is(err, dlock.ErrWrongType) || errors.Is(err, legacy.ErrNotTimestamp) {
		t.Fatalf("TryLock = %v, want ErrWrongType", err)
	}
	start := time.Now()
	if _, err = c.Lock(t.Context(), k, with(p, time.Second)...); !errors.Is(err, dlock.ErrWrongType) || time.Since(start) > time.Second {
		t.Fatalf("Lock = %v, want ErrWrongType at once", err)
	}
	if admin.LLen(t.Context(), k).Val() != 1 {
		t.Fatal("list touched")
	}

	// A held lock whose key becomes a list is lost at the next renewal.
	k = key(t)
	lk, err := c.Lock(t.Context(), k, with(p, 300*time.Millisecond)...)
	if err != nil {
		t.Fatal(err)
	}
	// In one transaction: a renewal between a DEL and an RPUSH would find
	// the key gone (a loss by expiry, not the wrong type).
	if _, err := admin.TxPipelined(t.Context(), func(p redis.Pipeliner) error {
		p.Del(t.Context(), k)
		p.RPush(t.Context(), k, "x")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("loss not signalled")
	}
	if err := lk.Err(); !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Err = %v, want ErrLost+ErrWrongType", err)
	}
	if err := lk.Unlock(t.Context()); !errors.Is(err, dlock.ErrLost) || admin.LLen(t.Context(), k).Val() != 1 {
		t.Fatalf("Unlock = %v; list length %d", err, admin.LLen(t.Context(), k).Val())
	}
}

// TestInvalidUnit: an unknown unit is rejected before any command.
func TestInvalidUnit(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	c, rdb := newDlock(t, dlock.Options{})
	rdb.AddHook(rec)
	_, err := c.TryLock(t.Context(), key(t), with(legacy.New(legacy.Options{Unit: 7}), time.Second)...)
	if !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("TryLock = %v, want ErrInvalidArgument", err)
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("sent %v", got)
	}
}

// TestRenewalKeepsLock: the watchdog rotates the timestamp, so the lock
// outlives its timeout while the seeds' clients keep trying.
func TestRenewalKeepsLock(t *testing.T) {
	t.Parallel()
	cases := []struct {
		unit legacy.Unit
		ttl  time.Duration
		hold time.Duration
	}{
		{legacy.Milliseconds, 300 * time.Millisecond, time.Second},
		{legacy.Seconds, 300 * time.Millisecond, 1300 * time.Millisecond}, // 1s timeout: value now+2
	}
	for _, tc := range cases {
		t.Run(tc.unit.String(), func(t *testing.T) {
			t.Parallel()
			c, admin := newDlock(t, dlock.Options{})
			k := key(t)
			p := legacy.New(legacy.Options{Unit: tc.unit})
			lk, err := c.Lock(t.Context(), k, with(p, tc.ttl)...)
			if err != nil {
				t.Fatal(err)
			}
			first := lk.Token()

			// A seed client with the seed's own settings tries meanwhile.
			ctx, cancel := context.WithTimeout(t.Context(), tc.hold)
			defer cancel()
			got := make(chan bool, 1)
			go func() {
				if tc.unit == legacy.Milliseconds {
					ok, _ := (&csharpClient{rdb: newRDB(t), key: k, timeout: 40, sleep: 30 * time.Millisecond}).lock(ctx)
					got <- ok
				} else {
					_, err := (&pythonClient{rdb: newRDB(t), key: k, timeout: 3}).lock(ctx)
					got <- err == nil
				}
			}()
			if <-got {
				t.Fatal("a seed client acquired a lock held and renewed by dlock")
			}
			if err := lk.Err(); err != nil {
				t.Fatalf("lock lost while renewed: %v", err)
			}
			if lk.Token() == first {
				t.Error("the timestamp was not rotated")
			}
			// The key holds the lock's current value (a renewal may be in
			// flight: Redis ran it, its reply is not applied yet).
			for i := 0; ; i++ {
				stored, token := admin.Get(t.Context(), k).Val(), lk.Token()
				if stored == token {
					break
				}
				if i == 10 {
					t.Fatalf("key holds %q, lock %q", stored, token)
				}
				time.Sleep(time.Millisecond)
			}
			if n, _ := strconv.ParseInt(lk.Token(), 10, 64); n <= stamp(tc.unit) {
				t.Errorf("stored time %d is not in the future", n)
			}
			if err := lk.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			if admin.Exists(t.Context(), k).Val() != 0 {
				t.Fatal("key left after Unlock")
			}
		})
	}
}

// TestLostSignal: another writer changes the key under a held lock; the
// holder learns it at its next renewal, and Do's function sees its
// context cancelled with the cause.
func TestLostSignal(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		write func(ctx context.Context, rdb *redis.Client, k string)
		cause error
	}{
		{"Overwritten", func(ctx context.Context, rdb *redis.Client, k string) {
			rdb.Set(ctx, k, stamp(legacy.Milliseconds)+60_000, 0) // e.g. a GETSET loser of another client
		}, dlock.ErrTaken},
		{"Garbage", func(ctx context.Context, rdb *redis.Client, k string) {
			rdb.Set(ctx, k, "garbage", 0)
		}, dlock.ErrTaken},
		{"Deleted", func(ctx context.Context, rdb *redis.Client, k string) {
			rdb.Del(ctx, k)
		}, dlock.ErrExpired},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, admin := newDlock(t, dlock.Options{})
			k := key(t)
			p := legacy.New(legacy.Options{Unit: legacy.Milliseconds})
			var before string
			start := time.Now()
			err := c.Do(t.Context(), k, func(ctx context.Context) error {
				tc.write(ctx, admin, k)
				before = admin.Get(ctx, k).Val()
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(3 * time.Second):
					return errors.New("not cancelled")
				}
			}, with(p, time.Second)...)
			if !errors.Is(err, dlock.ErrLost) || !errors.Is(err, tc.cause) {
				t.Fatalf("Do = %v, want ErrLost+%v", err, tc.cause)
			}
			if time.Since(start) > 2*time.Second {
				t.Errorf("loss signalled after %v", time.Since(start))
			}
			if got := admin.Get(t.Context(), k).Val(); got != before {
				t.Errorf("the other writer's value changed: %q -> %q", before, got)
			}
		})
	}
}

// TestClockSkew injects clocks 2s ahead of and behind the holder's.
func TestClockSkew(t *testing.T) {
	t.Parallel()
	t.Run("WithinRenewalMargin", func(t *testing.T) {
		// A 3s lock in seconds, renewed every second, stays at least 2s
		// ahead: contenders 2s ahead or behind never get it while it is
		// renewed, and get it once it is released.
		t.Parallel()
		c, _ := newDlock(t, dlock.Options{})
		k := key(t)
		lk, err := c.Lock(t.Context(), k, with(legacy.New(legacy.Options{}), 3*time.Second)...)
		if err != nil {
			t.Fatal(err)
		}
		contenders := []*legacy.Protocol{
			legacy.New(legacy.Options{Clock: skewed(2 * time.Second)}),
			legacy.New(legacy.Options{Clock: skewed(-2 * time.Second)}),
		}
		end := time.Now().Add(1500 * time.Millisecond)
		for time.Now().Before(end) {
			for _, p := range contenders {
				if _, err := c.TryLock(t.Context(), k, with(p, time.Second)...); !errors.Is(err, dlock.ErrNotAcquired) {
					t.Fatalf("skewed contender: TryLock = %v, want ErrNotAcquired", err)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := lk.Err(); err != nil {
			t.Fatalf("holder lost its lock: %v", err)
		}
		if err := lk.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		lk2, err := c.TryLock(t.Context(), k, with(contenders[0], time.Second)...)
		if err != nil {
			t.Fatal(err)
		}
		lk2.Unlock(t.Context())
	})
	t.Run("BeyondMargin", func(t *testing.T) {
		// In milliseconds a 1s lock has no room for 2s of skew: a client
		// 2s ahead (or a holder 2s behind) lets the other in at once. The
		// holder is told at its next renewal, and its renewal does not
		// touch the new holder's value.
		t.Parallel()
		for _, tc := range []struct{ holder, thief time.Duration }{
			{0, 2 * time.Second},  // thief's clock ahead
			{-2 * time.Second, 0}, // holder's clock behind
		} {
			c, admin := newDlock(t, dlock.Options{})
			k := key(t)
			ph := legacy.New(legacy.Options{Unit: legacy.Milliseconds, Clock: skewed(tc.holder)})
			pt := legacy.New(legacy.Options{Unit: legacy.Milliseconds, Clock: skewed(tc.thief)})
			lk, err := c.Lock(t.Context(), k, with(ph, time.Second)...)
			if err != nil {
				t.Fatal(err)
			}
			thief, err := c.TryLock(t.Context(), k, with(pt, time.Minute)...)
			if err != nil {
				t.Fatalf("holder %v thief %v: TryLock = %v, want the lock (the documented limit)", tc.holder, tc.thief, err)
			}
			select {
			case <-lk.Done():
			case <-time.After(2 * time.Second):
				t.Fatal("holder not told")
			}
			if err := lk.Err(); !errors.Is(err, dlock.ErrTaken) {
				t.Fatalf("Err = %v, want ErrTaken", err)
			}
			if got := admin.Get(t.Context(), k).Val(); got != thief.Token() {
				t.Fatalf("key holds %q, thief %q", got, thief.Token())
			}
			thief.Unlock(t.Context())
		}
	})
	t.Run("SlowClockWaitsLonger", func(t *testing.T) {
		// A crashed holder's lock that expired 100ms ago: a client 2s
		// behind still sees 1.9s left; a client with the right time takes
		// it over.
		t.Parallel()
		c, admin := newDlock(t, dlock.Options{})
		k := key(t)
		admin.Set(t.Context(), k, stamp(legacy.Milliseconds)-100, 0)
		slow := legacy.New(legacy.Options{Unit: legacy.Milliseconds, Clock: skewed(-2 * time.Second)})
		_, err := c.TryLock(t.Context(), k, with(slow, time.Second)...)
		var na *dlock.NotAcquiredError
		if !errors.As(err, &na) || na.TTL < 1800*time.Millisecond || na.TTL > 2*time.Second {
			t.Fatalf("slow clock: TryLock = %v, want NotAcquiredError with about 1.9s left", err)
		}
		lk, err := c.TryLock(t.Context(), k, with(legacy.New(legacy.Options{Unit: legacy.Milliseconds}), time.Second)...)
		if err != nil {
			t.Fatal(err)
		}
		lk.Unlock(t.Context())
	})
}

// TestMigration runs the two phases of the package doc's migration plan:
// old clients (legacy only) with "both" clients, then "both" clients with
// "token only" clients. In each phase every critical section runs alone.
func TestMigration(t *testing.T) {
	t.Parallel()
	const workers, rounds = 2, 10
	p := legacy.New(legacy.Options{})
	opts := dlock.Options{RetryInterval: 10 * time.Millisecond}
	both := func(ctx context.Context, c *dlock.Client, oldKey, newKey string, cs *counter) error {
		return c.Do(ctx, oldKey, func(ctx context.Context) error {
			return c.Do(ctx, newKey, cs.section, dlock.WithTTL(2*time.Second))
		}, with(p, 2*time.Second)...)
	}
	phase := func(t *testing.T, other func(ctx context.Context, c *dlock.Client, oldKey, newKey string, cs *counter) error) {
		oldKey, newKey := key(t), key(t)+":v2"
		cs := &counter{rdb: newRDB(t), key: oldKey + ":counter"}
		done := make(chan error, 2*workers)
		for i := range 2 * workers {
			c, _ := newDlock(t, opts)
			go func() {
				var err error
				for range rounds {
					if i%2 == 0 {
						err = errors.Join(err, both(t.Context(), c, oldKey, newKey, cs))
					} else {
						err = errors.Join(err, other(t.Context(), c, oldKey, newKey, cs))
					}
				}
				done <- err
			}()
		}
		for range 2 * workers {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
		cs.check(t, 2*workers*rounds)
	}
	t.Run("OldAndBoth", func(t *testing.T) {
		t.Parallel()
		phase(t, func(ctx context.Context, _ *dlock.Client, oldKey, _ string, cs *counter) error {
			py := &pythonClient{rdb: cs.rdb, key: oldKey, timeout: 3}
			lt, err := py.lock(ctx)
			if err != nil {
				return err
			}
			return errors.Join(cs.section(ctx), py.unlock(ctx, lt))
		})
	})
	t.Run("BothAndTokenOnly", func(t *testing.T) {
		t.Parallel()
		phase(t, func(ctx context.Context, c *dlock.Client, _, newKey string, cs *counter) error {
			return c.Do(ctx, newKey, cs.section, dlock.WithTTL(2*time.Second))
		})
	})
}
