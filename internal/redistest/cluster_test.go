package redistest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// TestCluster starts one 3-master cluster with a replica per master and
// checks, in order: the cluster client reaches every slot; killing the
// master of a key makes its replica take over, which the same client then
// reaches; the old master, restarted, rejoins as a replica.
func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	cl := redistest.StartCluster(t, redistest.ClusterConfig{Replicas: 1})
	t.Logf("3+3 cluster ready in %v", time.Since(start).Round(time.Millisecond))
	ctx := ctxT(t, 60*time.Second)

	if len(cl.Nodes) != 6 || len(cl.Masters(ctx)) != 3 {
		t.Fatalf("%d nodes, %d masters", len(cl.Nodes), len(cl.Masters(ctx)))
	}
	c := cl.Client(t)
	keys := []string{"a", "b", "c", "d", "e", "f", "{job}:lock"}
	owners := map[*redistest.Server]bool{}
	for _, k := range keys {
		if err := c.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
		m, err := cl.MasterOf(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		owners[m] = true
		if v, err := m.Client(t).Get(ctx, k).Result(); err != nil || v != k {
			t.Fatalf("%q not on its master %s: %q, %v", k, m.Addr(), v, err)
		}
	}
	if len(owners) < 2 {
		t.Fatalf("keys landed on %d masters", len(owners))
	}
	old, err := cl.MasterOf(ctx, "{job}:lock")
	if err != nil {
		t.Fatal(err)
	}
	// The replica has the key before its master is killed.
	setReplicated(ctx, t, old.Client(t), "{job}:lock", "{job}:lock", 1)
	killed := time.Now()
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	nm, err := cl.WaitFailover(ctx, "{job}:lock", old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover: %s serves {job} %v after SIGKILL", nm.Addr(), time.Since(killed).Round(time.Millisecond))
	for {
		v, err := c.Get(ctx, "{job}:lock").Result()
		if err == nil {
			if v != "{job}:lock" {
				t.Fatalf("after failover: %q", v)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("cluster client after failover: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("cluster client reads again %v after SIGKILL", time.Since(killed).Round(time.Millisecond))

	if err := old.Restart(); err != nil {
		t.Fatal(err)
	}
	oc := old.Client(t)
	for {
		info, err := oc.Info(ctx, "replication").Result()
		if err == nil && containsAll(info, "role:slave", "master_link_status:up") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("restarted old master never rejoined as a replica: %v\n%s", err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cl.WaitOK(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestClusterConfigErrors(t *testing.T) {
	if c, err := redistest.StartClusterMain(redistest.ClusterConfig{Masters: 2}); err == nil {
		_ = c.Close()
		t.Fatal("2 masters accepted")
	}
}
