package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterConfig describes a Redis Cluster. The zero value is the default:
// 3 masters, no replicas, cluster-node-timeout 1000, no persistence.
type ClusterConfig struct {
	Masters     int           // default 3 (at least 3)
	Replicas    int           // replicas per master; default 0
	NodeTimeout time.Duration // cluster-node-timeout; default 1s
	// Data configures every node (persistence, extra arguments); the
	// cluster arguments are added to it.
	Data Config
}

func (c ClusterConfig) withDefaults() (ClusterConfig, error) {
	if c.Masters < 0 || c.Replicas < 0 || c.NodeTimeout < 0 {
		return c, errors.New("redistest: negative ClusterConfig field")
	}
	if c.Masters == 0 {
		c.Masters = 3
	}
	if c.Masters < 3 {
		return c, fmt.Errorf("redistest: a cluster needs at least 3 masters, not %d", c.Masters)
	}
	if c.NodeTimeout == 0 {
		c.NodeTimeout = time.Second
	}
	return c, nil
}

// Cluster is a Redis Cluster created with `redis-cli --cluster create`,
// every node on its own free loopback port (and bus port) in its own
// temporary directory. Kill, Pause or Restart the Nodes to inject faults: a
// restarted node keeps its nodes.conf and rejoins (as a replica, if its
// slots were failed over meanwhile).
type Cluster struct {
	Nodes []*Server

	cfg       ClusterConfig
	closeOnce sync.Once
	closeErr  error
}

// StartCluster starts a cluster and waits until every node reports
// cluster_state:ok and every replica is in sync (about 2–3 s for 3 masters,
// a little more with replicas). t.Cleanup kills every node by PID and
// removes the directories; if the test failed, the log tails are logged.
func StartCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	if err := checkBinaries(true); err != nil {
		t.Fatalf("%v", err)
	}
	c, err := StartClusterMain(cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("redistest: cluster logs:\n%s", c.logs())
		}
		if err := c.Close(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
	return c
}

// StartClusterMain is like [StartCluster] for code without a testing.TB,
// such as TestMain; the caller must call [Cluster.Close].
func StartClusterMain(cfg ClusterConfig) (_ *Cluster, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkBinaries(true); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.logs())
			_ = c.Close()
		}
	}()
	total := cfg.Masters * (1 + cfg.Replicas)
	for range total {
		n, err := startClusterNode(cfg)
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), topologyReadyTimeout)
	defer cancel()
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(cfg.Replicas), "--cluster-yes")
	cli := CLIBinary()
	cmd := exec.CommandContext(ctx, cli, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redistest: %s %s: %w\n%s", cli, strings.Join(args, " "), err, out)
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// startClusterNode starts one cluster-enabled server with an explicit
// cluster bus port (so a main port above 55535 works too), retrying with
// other ports if one is taken.
func startClusterNode(cfg ClusterConfig) (*Server, error) {
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		bus, err := freePort()
		if err != nil {
			return nil, err
		}
		d := cfg.Data
		d.ExtraArgs = append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(cfg.NodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(bus),
			"--repl-diskless-sync-delay", "0",
		}, cfg.Data.ExtraArgs...)
		n, err := StartMain(d)
		if err == nil {
			return n, nil
		}
		lastErr = err
		if !errors.Is(err, errPortInUse) && !strings.Contains(err.Error(), "Address already in use") {
			return nil, err
		}
	}
	return nil, fmt.Errorf("redistest: giving up after %d attempts: %w", startAttempts, lastErr)
}

// waitReady waits until the cluster has the configured number of masters,
// every node reports cluster_state:ok and knows every other node, and every
// replica is in sync.
func (c *Cluster) waitReady(ctx context.Context) error {
	err := poll(ctx, func() error {
		masters := 0
		for _, n := range c.Nodes {
			role, err := c.nodeState(ctx, n, len(c.Nodes))
			if err != nil {
				return err
			}
			if role == "master" {
				masters++
			}
		}
		if masters != c.cfg.Masters {
			return fmt.Errorf("%d masters, want %d", masters, c.cfg.Masters)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistest: cluster not ready: %w", err)
	}
	return nil
}

// nodeState checks that n reports cluster_state:ok, knows at least known
// nodes and, if it is a replica, that its link to its master is up. It
// returns n's role.
func (c *Cluster) nodeState(ctx context.Context, n *Server, known int) (string, error) {
	rc := redis.NewClient(&redis.Options{Addr: n.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
	defer rc.Close()
	info, err := rc.ClusterInfo(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("%s: %w", n.Addr(), err)
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return "", fmt.Errorf("%s: cluster_state not ok", n.Addr())
	}
	if k := infoField(info, "cluster_known_nodes"); k < known {
		return "", fmt.Errorf("%s knows %d nodes, want %d", n.Addr(), k, known)
	}
	repl, err := rc.Info(ctx, "replication").Result()
	if err != nil {
		return "", fmt.Errorf("%s: %w", n.Addr(), err)
	}
	if strings.Contains(repl, "role:master") {
		return "master", nil
	}
	if !strings.Contains(repl, "master_link_status:up") {
		return "", fmt.Errorf("replica %s: link to its master not up", n.Addr())
	}
	return "replica", nil
}

// infoField returns the integer value of field in an INFO-style text (-1 if
// absent).
func infoField(info, field string) int {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return -1
}

// Addrs returns the addresses of every node.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// ClusterOptions returns options for redis.NewClusterClient: every node's
// address, short timeouts suited to tests, and a slot-map reload every
// second. go-redis (v9.23) reloads its slot map on MOVED, ASK and READONLY
// replies and when the map is older than ClusterStateReloadInterval
// (default 60s), but not on connection errors: with the default, the slots
// of a killed master stay routed to it for up to a minute after its replica
// took over.
func (c *Cluster) ClusterOptions() *redis.ClusterOptions {
	return &redis.ClusterOptions{
		Addrs:                      c.Addrs(),
		DialTimeout:                time.Second,
		ReadTimeout:                time.Second,
		WriteTimeout:               time.Second,
		ClusterStateReloadInterval: time.Second,
	}
}

// NewClient returns a cluster client over every node. The caller must close it.
func (c *Cluster) NewClient() *redis.ClusterClient {
	return redis.NewClusterClient(c.ClusterOptions())
}

// Client is NewClient, closed in t.Cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := c.NewClient()
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Slot returns the hash slot of key, as CLUSTER KEYSLOT computes it on a
// running node.
func (c *Cluster) Slot(ctx context.Context, key string) (int, error) {
	var errs []error
	for _, n := range c.Nodes {
		if n.PID() == 0 {
			continue
		}
		rc := redis.NewClient(&redis.Options{Addr: n.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
		s, err := rc.ClusterKeySlot(ctx, key).Result()
		_ = rc.Close()
		if err == nil {
			return int(s), nil
		}
		errs = append(errs, err)
	}
	return 0, fmt.Errorf("redistest: CLUSTER KEYSLOT: no node answered: %w", errors.Join(errs...))
}

// MasterOf returns the master serving key's slot, as CLUSTER SLOTS on the
// first running node that answers reports it.
func (c *Cluster) MasterOf(ctx context.Context, key string) (*Server, error) {
	slot, err := c.Slot(ctx, key)
	if err != nil {
		return nil, err
	}
	return c.masterOfSlot(ctx, slot)
}

// Masters returns the running nodes that answer ROLE as master.
func (c *Cluster) Masters(ctx context.Context) []*Server {
	var out []*Server
	for _, n := range c.Nodes {
		if n.PID() != 0 && isRole(ctx, n, "master") == nil {
			out = append(out, n)
		}
	}
	return out
}

// WaitOK waits until every running node reports cluster_state:ok.
func (c *Cluster) WaitOK(ctx context.Context) error {
	err := poll(ctx, func() error {
		for _, n := range c.Nodes {
			if n.PID() == 0 {
				continue
			}
			if _, err := c.nodeState(ctx, n, 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistest: cluster not ok: %w", err)
	}
	return nil
}

// WaitFailover waits until key's slot is served by a running master other
// than old and every running node reports cluster_state:ok; it returns the
// new master.
func (c *Cluster) WaitFailover(ctx context.Context, key string, old *Server) (*Server, error) {
	var m *Server
	err := poll(ctx, func() error {
		n, err := c.MasterOf(ctx, key)
		if err != nil {
			return err
		}
		if n == old || n.PID() == 0 {
			return fmt.Errorf("slot still served by %s", n.Addr())
		}
		if err := isRole(ctx, n, "master"); err != nil {
			return err
		}
		for _, x := range c.Nodes {
			if x.PID() == 0 {
				continue
			}
			if _, err := c.nodeState(ctx, x, 0); err != nil {
				return err
			}
		}
		m = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redistest: no failover of %q away from %s: %w", key, old.Addr(), err)
	}
	return m, nil
}

func (c *Cluster) node(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

func (c *Cluster) logs() string {
	var b strings.Builder
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "=== cluster node %s ===\n%s", n.Addr(), logTail(n.Dir, nil))
	}
	return b.String()
}

// Close kills every node by PID and removes the directories. It is
// idempotent.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		var errs []error
		for _, n := range c.Nodes {
			errs = append(errs, n.Close())
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// ManualFailover sends CLUSTER FAILOVER to replica, a replica of old, and
// waits (WaitFailover) until key's slot is served by another master. A
// loaded machine can let a manual failover time out unfinished (the
// replica gives up once its master has not paused in time), so the
// command is sent again after every 15 s without a failover, for at most
// a minute in all.
func (c *Cluster) ManualFailover(ctx context.Context, t testing.TB, replica *Server, key string, old *Server) (*Server, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		// Refused once replica is a master: the last one finished late.
		if err := replica.Client(t).Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil && isRole(ctx, replica, "master") != nil {
			return nil, fmt.Errorf("redistest: CLUSTER FAILOVER on %s: %w", replica.Addr(), err)
		}
		tctx, tcancel := context.WithTimeout(ctx, 15*time.Second)
		m, err := c.WaitFailover(tctx, key, old)
		tcancel()
		if err == nil || ctx.Err() != nil {
			return m, err
		}
	}
}
