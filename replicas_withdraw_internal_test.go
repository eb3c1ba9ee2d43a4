package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestMinReplicasWithdrawSurvivesFailover: under MinReplicas, the
// withdrawal of a token (an acquire whose reply was lost, a waiter that
// gave up) waits for the replicas as a grant does. Its tombstone is what
// refuses a late copy of the token's acquire; the master accepts it while
// no replica can receive it, and then dies. The withdrawal must not count
// as done then: it is sent again until replicas acknowledge it (here on
// the promoted replica), so the acquire that lands late on the new master
// finds the tombstone and is refused, instead of holding the key for
// nobody until its TTL.
func TestMinReplicasWithdrawSurvivesFailover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := redistest.StartSentinel(t, redistest.SentinelConfig{})
	o := s.FailoverOptions()
	o.ContextTimeoutEnabled = true
	rdb := redis.NewFailoverClient(o)
	c, err := New(rdb, Options{MinReplicas: 1, ReplicaTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = rdb.Close()
	})
	master, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mc := master.Client(t)
	cutReplicas(t, mc, s.Nodes, master)

	keys, token := c.keysFor("wdfo"), engine.NewToken()
	p := c.token
	done := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		done <- c.eng.WithdrawRetry(wctx, p, keys, token)
	}()
	// The master has the tombstone, which no replica can receive.
	for mc.ZScore(ctx, keys.Tombs, token).Err() != nil {
		time.Sleep(5 * time.Millisecond)
	}
	if err := master.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, n := range s.Nodes {
		if n != master {
			if err := n.Resume(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.WaitFailover(ctx, master); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("withdrawal across the failover: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the withdrawal never returned")
	}
	// The acquire of the withdrawn token lands now, late, on the new master.
	late := p.(ackedTokenLock).tokenLock
	g, err := late.Acquire(ctx, engine.Attempt{Mode: engine.ModeTry, Queue: c.queue}, keys, token, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g.Acquired {
		t.Fatal("a late acquire of the withdrawn token was granted on the promoted replica: the withdrawal's tombstone was lost in the failover")
	}
}

// cutReplicas makes sure the replicas among nodes have everything master
// wrote so far, then pauses them and breaks their links, so that the
// master's next writes reach none of them.
func cutReplicas(t *testing.T, mc *redis.Client, nodes []*redistest.Server, master *redistest.Server) {
	t.Helper()
	ctx := t.Context()
	var wait *redis.Cmd
	if _, err := mc.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "synced", "1", time.Minute) // WAIT covers its connection's writes only
		wait = p.Do(ctx, "wait", len(nodes)-1, 5000)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := wait.Int(); err != nil || n != len(nodes)-1 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
	for _, n := range nodes {
		if n != master {
			if err := n.Pause(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := mc.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
}
