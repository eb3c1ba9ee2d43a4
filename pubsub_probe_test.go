package dlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestPubSubProbeSentinel: a waiter's subscription that is alive but no
// longer reached by PUBLISH is noticed by the liveness probe and replaced,
// and the queued waiter is handed the lock without waiting for its retry.
//
// The scenario is a real one: after SENTINEL FAILOVER the old master keeps
// answering as master for some 10 s, until the sentinels demote it (also
// what a second failover or a partition leaves behind). The go-redis
// failover client moves its command connections to the new master but
// leaves its pub/sub connection on the old one, where no PUBLISH arrives:
// the release on the new master hands the lock to the waiter and publishes
// to nobody. Two waiting Clients with retries minutes away sit through the
// same failover: the one with the probe gets its lock within the probe's
// period and bound; the one without it (the behaviour before the probe) is
// still waiting then, which shows the subscription really was unreached.
func TestPubSubProbeSentinel(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, redistest.SentinelConfig{})
	ctx := t.Context()
	m0, err := s.WaitSettled(ctx)
	if err != nil {
		t.Fatal(err)
	}
	client := func(opts dlock.Options) *dlock.Client {
		rdb := s.NewClient()
		c, err := dlock.New(rdb, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Close()
			_ = rdb.Close()
		})
		return c
	}
	const every, within = time.Second, time.Second
	// Retries a minute away: only a message (or a redial's wake-up) serves
	// the waiters within the test.
	slow := dlock.Options{RetryInterval: time.Minute, WaiterLease: 3 * time.Minute, PickupTimeout: time.Minute}
	probed, unprobed := client(slow), client(slow)
	dlock.SetPubSubProbe(probed, every, within)
	dlock.SetPubSubProbe(unprobed, 0, 0)
	holder := client(dlock.Options{})
	const k1, k2 = "probe:k1", "probe:k2"
	var tokens []string
	for _, k := range []string{k1, k2} {
		lk, err := holder.Lock(ctx, k, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, lk.Token())
	}

	type result struct {
		lk  *dlock.Lock
		err error
		at  time.Time
	}
	wait := func(c *dlock.Client, k string) (chan result, context.CancelFunc) {
		wctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		ch := make(chan result, 1)
		go func() {
			lk, err := c.Lock(wctx, k)
			ch <- result{lk, err, time.Now()}
		}()
		return ch, cancel
	}
	got1, cancel1 := wait(probed, k1)
	defer cancel1()
	got2, cancel2 := wait(unprobed, k2)
	defer cancel2()
	waitFor(t, "both waiters to queue", func() bool {
		return probed.Stats().Waiting == 1 && unprobed.Stats().Waiting == 1
	})
	// Let a probe or two go round while the subscription is fine: no redial.
	time.Sleep(every + within)
	if n := probed.Stats().PubSubRedials; n != 0 {
		t.Fatalf("%d redials before the failover", n)
	}
	// Everything written so far is on the replicas.
	direct0 := m0.Client(t)
	if n, err := waitReplicated(ctx, direct0, "probe:marker", 2); err != nil || n != 2 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}

	sc := redis.NewSentinelClient(&redis.Options{Addr: s.SentinelAddrs()[0]})
	defer sc.Close()
	if err := sc.Failover(ctx, redistest.MasterName).Err(); err != nil {
		t.Fatal(err)
	}
	m1, err := s.WaitFailover(ctx, m0)
	if err != nil {
		t.Fatal(err)
	}
	// Every sentinel names the new master (one that missed the failover
	// would send the releaser below to the old one).
	waitFor(t, "every sentinel to name the new master", func() bool {
		for _, a := range s.SentinelAddrs() {
			c := redis.NewSentinelClient(&redis.Options{Addr: a})
			addr, err := c.GetMasterAddrByName(ctx, redistest.MasterName).Result()
			_ = c.Close()
			if err != nil || len(addr) != 2 || addr[1] != strconv.Itoa(m1.Port) {
				return false
			}
		}
		return true
	})
	// The old master stays a master, alone: the waiters' subscriptions
	// are on it.
	if role(t, direct0) != "master" {
		if err := direct0.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Release both locks on the new master, by token, from a Client made
	// after the failover: each hands its key to the queued waiter.
	releaser := client(dlock.Options{})
	for i, k := range []string{k1, k2} {
		if err := adminOf(t, releaser).ReleaseToken(ctx, k, tokens[i]); err != nil {
			t.Fatalf("ReleaseToken %s: %v", k, err)
		}
	}
	released := time.Now()
	direct1 := m1.Client(t)
	if v := direct0.Get(ctx, k2).Val(); v != tokens[1] {
		t.Fatalf("the old master (ROLE %s) holds %q for %s, want the old holder's token (new master: %q): the release reached it", role(t, direct0), v, k2, direct1.Get(ctx, k2).Val())
	}

	// A probe goes out within every (the first after the switch may still
	// reach the old master through a connection not yet moved, and come
	// back), is overdue within + a tick, then the redial and the confirming
	// round trip.
	const bound = 2*every + within + 3*time.Second
	var r1 result
	select {
	case r1 = <-got1:
	case <-time.After(bound):
		t.Fatalf("the probed waiter was not handed its lock within %v of the release (redials: %d)", bound, probed.Stats().PubSubRedials)
	}
	if r1.err != nil {
		t.Fatalf("probed waiter: %v", r1.err)
	}
	t.Logf("probed waiter handed its lock %v after the release", r1.at.Sub(released).Round(time.Millisecond))
	if v := direct1.Get(ctx, k1).Val(); v != r1.lk.Token() {
		t.Fatalf("new master holds %q for %s, want the probed waiter's token", v, k1)
	}
	if n := probed.Stats().PubSubRedials; n < 1 {
		t.Errorf("probed Client redialled %d times, want at least once", n)
	}
	// The Client without the probe, whose subscription sits on the same
	// old master, heard nothing: it waits for its retry, a minute away.
	// (Once the sentinels demote the old master, some 10 s after the
	// failover, PUBLISHes on the new master reach it by replication: the
	// verdict only counts while it is a master.)
	var r2 *result
	select {
	case r := <-got2:
		r2 = &r
		if role(t, direct0) == "master" {
			t.Fatalf("the waiter without the probe got %s %v after the release (err %v): the old master's subscription was reached after all, the scenario does not reproduce",
				k2, r.at.Sub(released).Round(time.Millisecond), r.err)
		}
	case <-time.After(500 * time.Millisecond):
	}
	if r := role(t, direct0); r != "master" {
		t.Logf("the old master was demoted (ROLE %s) before the verdict on the waiter without the probe: inconclusive", r)
	}
	if n := unprobed.Stats().PubSubRedials; n != 0 {
		t.Errorf("Client without the probe redialled %d times", n)
	}

	// The new subscription hears hand-offs: with the probe off now, a
	// second waiter of the probed Client is served by the message alone.
	dlock.SetPubSubProbe(probed, 0, 0)
	got3, cancel3 := wait(probed, k1)
	defer cancel3()
	waitFor(t, "the second waiter to queue", func() bool { return probed.Stats().Waiting == 1 })
	if err := r1.lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	unlocked := time.Now()
	select {
	case r3 := <-got3:
		if r3.err != nil {
			t.Fatal(r3.err)
		}
		t.Logf("second waiter handed its lock %v after the Unlock", r3.at.Sub(unlocked).Round(time.Millisecond))
		_ = r3.lk.Unlock(ctx)
	case <-time.After(3 * time.Second):
		t.Fatal("the hand-off to a second waiter on the new subscription did not arrive")
	}

	cancel2()
	if r2 == nil {
		r := <-got2
		r2 = &r
	}
	if r2.err == nil {
		_ = r2.lk.Unlock(ctx)
	} else if !errors.Is(r2.err, dlock.ErrContextDone) {
		t.Errorf("waiter without the probe: %v", r2.err)
	}
}

func role(t *testing.T, c *redis.Client) string {
	t.Helper()
	r, err := c.Do(t.Context(), "ROLE").Slice()
	if err != nil || len(r) == 0 {
		t.Fatalf("ROLE: %v %v", r, err)
	}
	s, _ := r[0].(string)
	return strings.ToLower(s)
}
