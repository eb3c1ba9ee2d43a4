package redistest_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestSentinel starts one Sentinel topology and checks, in order: the
// failover client reaches the master and writes replicate; killing the
// master makes the sentinels promote a replica, which the same client then
// reaches; the old master, restarted, comes back as a replica.
func TestSentinel(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := redistest.StartSentinel(t, redistest.SentinelConfig{})
	t.Logf("sentinel topology ready in %v", time.Since(start).Round(time.Millisecond))
	ctx := ctxT(t, 60*time.Second)

	if len(s.Nodes) != 3 || len(s.SentinelAddrs()) != 3 {
		t.Fatalf("%d nodes, %d sentinels", len(s.Nodes), len(s.SentinelAddrs()))
	}
	m, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m != s.Nodes[0] {
		t.Fatalf("master %s, want Nodes[0] %s", m.Addr(), s.Nodes[0].Addr())
	}
	c := s.Client(t)
	setReplicated(ctx, t, c, "k", "v", 2)
	for _, r := range s.Nodes[1:] {
		if v, err := r.Client(t).Get(ctx, "k").Result(); err != nil || v != "v" {
			t.Fatalf("replica %s: %q, %v", r.Addr(), v, err)
		}
	}

	killed := time.Now()
	old, err := s.KillMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nm, err := s.WaitFailover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover: new master %s named %v after SIGKILL", nm.Addr(), time.Since(killed).Round(time.Millisecond))
	if !slices.Contains(s.Nodes[1:], nm) {
		t.Fatalf("new master %s is not a former replica", nm.Addr())
	}
	// The failover client follows the switch.
	err = errors.New("not tried")
	for time.Since(killed) < 20*time.Second {
		if err = c.Set(ctx, "k2", "v2", 0).Err(); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("failover client after the failover: %v", err)
	}
	t.Logf("failover client writes again %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
	if v, err := nm.Client(t).Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("new master lost a replicated write: %q, %v", v, err)
	}

	// The old master comes back empty, as a master, until the sentinels
	// demote it.
	if err := old.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	oc := old.Client(t)
	for {
		info, err := oc.Info(ctx, "replication").Result()
		if err == nil && containsAll(info, "role:slave", "master_link_status:up") {
			t.Logf("restarted old master demoted to an in-sync replica after %v", time.Since(restarted).Round(time.Millisecond))
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("restarted old master never became an in-sync replica: %v\n%s", err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v, err := oc.Get(ctx, "k2").Result(); err != nil || v != "v2" {
		t.Fatalf("old master as replica: %q, %v", v, err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range s.Nodes {
		if n.PID() != 0 {
			t.Fatalf("node %s still running after Close", n.Addr())
		}
	}
	if err := redis.NewClient(&redis.Options{Addr: s.SentinelAddrs()[0], MaxRetries: -1}).Ping(ctx).Err(); err == nil {
		t.Fatal("sentinel still answers after Close")
	}
}

func TestSentinelConfigErrors(t *testing.T) {
	for _, cfg := range []redistest.SentinelConfig{{Replicas: -1}, {Sentinels: 1, Quorum: 2}} {
		if s, err := redistest.StartSentinelMain(cfg); err == nil {
			_ = s.Close()
			t.Fatalf("%+v accepted", cfg)
		}
	}
}
