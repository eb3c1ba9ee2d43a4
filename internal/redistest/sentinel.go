package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the sentinels of a [Sentinel] monitor their master by.
const MasterName = "mymaster"

// topologyReadyTimeout bounds how long a Sentinel or Cluster start waits for
// the topology to settle.
const topologyReadyTimeout = 30 * time.Second

// SentinelConfig describes a Sentinel topology. The zero value is the
// default: one master, 2 replicas, 3 sentinels with quorum 2,
// down-after-milliseconds 1000 and failover-timeout 3000, no persistence.
type SentinelConfig struct {
	Replicas        int           // replicas of the master; default 2
	Sentinels       int           // sentinel processes; default 3
	Quorum          int           // sentinels that must agree the master is down; default a majority
	DownAfter       time.Duration // down-after-milliseconds; default 1s
	FailoverTimeout time.Duration // failover-timeout; default 3s
	// Data configures the master and the replicas (persistence, extra
	// arguments); the replication arguments are added to it.
	Data Config
}

func (c SentinelConfig) withDefaults() (SentinelConfig, error) {
	if c.Replicas < 0 || c.Sentinels < 0 || c.Quorum < 0 || c.DownAfter < 0 || c.FailoverTimeout < 0 {
		return c, errors.New("redistest: negative SentinelConfig field")
	}
	if c.Replicas == 0 {
		c.Replicas = 2
	}
	if c.Sentinels == 0 {
		c.Sentinels = 3
	}
	if c.Quorum == 0 {
		c.Quorum = c.Sentinels/2 + 1
	}
	if c.DownAfter == 0 {
		c.DownAfter = time.Second
	}
	if c.FailoverTimeout == 0 {
		c.FailoverTimeout = 3 * time.Second
	}
	if c.Quorum > c.Sentinels {
		return c, fmt.Errorf("redistest: quorum %d > %d sentinels", c.Quorum, c.Sentinels)
	}
	return c, nil
}

// Sentinel is a Sentinel-managed replication group: a master, its replicas
// and the sentinels monitoring it as [MasterName], every process on its own
// free loopback port in its own temporary directory.
//
// Nodes are the data servers: Nodes[0] is the initial master, the others its
// replicas. Kill, Pause or Restart them to inject faults; after a failover
// the master is another node ([Sentinel.Master] finds it). A restarted node
// comes back without data (unless Data.AOF is set); a restarted former
// master comes back as a master, and the sentinels turn it into a replica
// only some 10 s later (measured: 10.8 s).
type Sentinel struct {
	Nodes []*Server

	cfg       SentinelConfig
	sentinels []*sentinelProc
	closeOnce sync.Once
	closeErr  error
}

// sentinelProc is one redis-server --sentinel process.
type sentinelProc struct {
	port int
	dir  string
	p    *process
}

func (s *sentinelProc) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// StartSentinel starts a Sentinel topology and waits until every sentinel
// knows every replica and every other sentinel (typically 2–3 s). t.Cleanup
// kills every process by PID and removes the directories; if the test
// failed, the tails of the logs are logged first.
func StartSentinel(t testing.TB, cfg SentinelConfig) *Sentinel {
	t.Helper()
	if err := checkBinaries(false); err != nil {
		t.Fatalf("%v", err)
	}
	s, err := StartSentinelMain(cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("redistest: sentinel topology logs:\n%s", s.logs())
		}
		if err := s.Close(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
	return s
}

// StartSentinelMain is like [StartSentinel] for code without a testing.TB,
// such as TestMain; the caller must call [Sentinel.Close].
func StartSentinelMain(cfg SentinelConfig) (_ *Sentinel, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Sentinel{cfg: cfg}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, s.logs())
			_ = s.Close()
		}
	}()
	data := cfg.Data
	data.ExtraArgs = append([]string{"--repl-diskless-sync-delay", "0"}, data.ExtraArgs...)
	master, err := StartMain(data)
	if err != nil {
		return nil, err
	}
	s.Nodes = append(s.Nodes, master)
	for range cfg.Replicas {
		rc := data
		rc.ExtraArgs = append(append([]string(nil), data.ExtraArgs...), "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
		r, err := StartMain(rc)
		if err != nil {
			return nil, err
		}
		s.Nodes = append(s.Nodes, r)
	}
	for range cfg.Sentinels {
		sp, err := startSentinelProc(cfg, master.Port)
		if err != nil {
			return nil, err
		}
		s.sentinels = append(s.sentinels, sp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), topologyReadyTimeout)
	defer cancel()
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// startSentinelProc writes a sentinel.conf into a new temporary directory
// and starts redis-server on it in sentinel mode.
func startSentinelProc(cfg SentinelConfig, masterPort int) (*sentinelProc, error) {
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "redistest-sentinel-")
		if err != nil {
			return nil, fmt.Errorf("redistest: creating temp dir: %w", err)
		}
		conf := strings.Join([]string{
			"port " + strconv.Itoa(port),
			"bind 127.0.0.1",
			"daemonize no",
			"dir " + dir,
			"logfile " + filepath.Join(dir, "redis.log"),
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", MasterName, masterPort, cfg.Quorum),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", MasterName, cfg.DownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", MasterName, cfg.FailoverTimeout.Milliseconds()),
			fmt.Sprintf("sentinel parallel-syncs %s %d", MasterName, max(cfg.Replicas, 1)),
			"",
		}, "\n")
		confPath := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: %w", err)
		}
		p, err := spawnProcess(dir, port, []string{confPath, "--sentinel"})
		if err == nil {
			return &sentinelProc{port: port, dir: dir, p: p}, nil
		}
		_ = os.RemoveAll(dir)
		lastErr = err
		if !errors.Is(err, errPortInUse) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("redistest: giving up after %d attempts: %w", startAttempts, lastErr)
}

// spawnProcess starts redis-server with args in dir, expecting it to listen
// on port, and waits until it answers PING. On failure the process is gone.
// An error wrapping errPortInUse means it could not bind a port.
func spawnProcess(dir string, port int, args []string) (*process, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	stderr, err := os.OpenFile(filepath.Join(dir, "stderr.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	defer stderr.Close()
	bin := ServerBinary()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startOnSpawnerThread(cmd); err != nil {
		return nil, fmt.Errorf("redistest: starting %s: %w", bin, err)
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := waitReady(addr, p); err != nil {
		_ = kill(p)
		tail := logTail(dir, nil)
		if strings.Contains(tail, "Address already in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return nil, fmt.Errorf("redistest: %s %v on %s (dir %s): %w\n%s", bin, args, addr, dir, err, tail)
	}
	return p, nil
}

// waitReady waits until every sentinel monitors the master with all its
// replicas and all the other sentinels, and the replicas are in sync.
func (s *Sentinel) waitReady(ctx context.Context) error {
	for _, sp := range s.sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sp.addr()})
		err := poll(ctx, func() error {
			m, err := c.Master(ctx, MasterName).Result()
			if err != nil {
				return err
			}
			if m["flags"] != "master" || m["num-slaves"] != strconv.Itoa(s.cfg.Replicas) ||
				m["num-other-sentinels"] != strconv.Itoa(s.cfg.Sentinels-1) {
				return fmt.Errorf("sentinel %s sees master %v", sp.addr(), m)
			}
			return nil
		})
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("redistest: sentinel topology not ready: %w", err)
		}
	}
	for _, r := range s.Nodes[1:] {
		if err := waitReplicaSynced(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// waitReplicaSynced waits until r reports master_link_status:up.
func waitReplicaSynced(ctx context.Context, r *Server) error {
	c := r.NewClient()
	defer c.Close()
	err := poll(ctx, func() error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica %s: link not up", r.Addr())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistest: replica not in sync: %w", err)
	}
	return nil
}

// poll calls f every 20ms until it returns nil or ctx ends, and then
// returns f's last error.
func poll(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// SentinelAddrs returns the addresses of the sentinels.
func (s *Sentinel) SentinelAddrs() []string {
	out := make([]string, len(s.sentinels))
	for i, sp := range s.sentinels {
		out[i] = sp.addr()
	}
	return out
}

// FailoverOptions returns options for redis.NewFailoverClient: the master
// name, the sentinel addresses, and short timeouts suited to tests.
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{
		MasterName:    MasterName,
		SentinelAddrs: s.SentinelAddrs(),
		DialTimeout:   time.Second,
		ReadTimeout:   time.Second,
		WriteTimeout:  time.Second,
	}
}

// NewClient returns a failover client (redis.NewFailoverClient) that finds
// the master through the sentinels. The caller must close it.
func (s *Sentinel) NewClient() *redis.Client {
	return redis.NewFailoverClient(s.FailoverOptions())
}

// Client is NewClient, closed in t.Cleanup.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := s.NewClient()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// errUnknownMaster: a sentinel names a master that is not a node of the
// topology.
var errUnknownMaster = errors.New("redistest: sentinel names unknown master")

// namedBy returns the node sentinel sp names as master.
func (s *Sentinel) namedBy(ctx context.Context, sp *sentinelProc) (*Server, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: sp.addr(), DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	addr, err := c.GetMasterAddrByName(ctx, MasterName).Result()
	if err != nil {
		return nil, err
	}
	n := s.node(net.JoinHostPort(addr[0], addr[1]))
	if n == nil {
		return nil, fmt.Errorf("%w %v (sentinel %s)", errUnknownMaster, addr, sp.addr())
	}
	return n, nil
}

// Master returns the node the sentinels currently name as master (the
// answer of the first sentinel that replies), after checking that it is
// running and answers ROLE with "master".
func (s *Sentinel) Master(ctx context.Context) (*Server, error) {
	var errs []error
	for _, sp := range s.sentinels {
		if sp.p.exited() {
			continue
		}
		n, err := s.namedBy(ctx, sp)
		if errors.Is(err, errUnknownMaster) {
			return nil, err
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := isRole(ctx, n, "master"); err != nil {
			return nil, err
		}
		return n, nil
	}
	return nil, fmt.Errorf("redistest: no sentinel answered: %w", errors.Join(errs...))
}

// WaitFailover waits until the sentinels name a master other than old and
// that node answers as master; it returns the new master.
func (s *Sentinel) WaitFailover(ctx context.Context, old *Server) (*Server, error) {
	var m *Server
	err := poll(ctx, func() error {
		n, err := s.Master(ctx)
		if err != nil {
			return err
		}
		if n == old {
			return errors.New("still the old master")
		}
		m = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redistest: no failover away from %s: %w", old.Addr(), err)
	}
	return m, nil
}

// WaitSettled waits until the topology agrees with itself and returns its
// master: every running sentinel names the same master, which answers ROLE
// as master, and every other running node is its replica with the link up,
// all of it seen twice 300ms apart. After a failover on a busy machine a
// sentinel that missed the new configuration can start a second failover,
// leaving two nodes answering as master for a while; a test that needs one
// master (a PUBLISH reaching every subscriber, say) waits for this first.
func (s *Sentinel) WaitSettled(ctx context.Context) (*Server, error) {
	var m *Server
	seen := 0
	err := poll(ctx, func() error {
		n, err := s.agreedMaster(ctx)
		if err != nil {
			seen = 0
			return err
		}
		if n != m {
			m, seen = n, 0
		}
		if seen++; seen < 2 {
			time.Sleep(300 * time.Millisecond)
			return errors.New("settled once, checking again")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redistest: sentinel topology not settled: %w", err)
	}
	return m, nil
}

// agreedMaster returns the master every running sentinel names, after
// checking that every other running node replicates it with the link up.
func (s *Sentinel) agreedMaster(ctx context.Context) (*Server, error) {
	var m *Server
	for _, sp := range s.sentinels {
		if sp.p.exited() {
			continue
		}
		n, err := s.namedBy(ctx, sp)
		if err != nil {
			return nil, err
		}
		if m != nil && n != m {
			return nil, fmt.Errorf("sentinels name both %s and %s", m.Addr(), n.Addr())
		}
		m = n
	}
	if m == nil {
		return nil, errors.New("no sentinel running")
	}
	if err := isRole(ctx, m, "master"); err != nil {
		return nil, err
	}
	for _, r := range s.Nodes {
		if r == m || r.PID() == 0 {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
		info, err := c.Info(ctx, "replication").Result()
		_ = c.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Addr(), err)
		}
		if !strings.Contains(info, "role:slave") || !strings.Contains(info, fmt.Sprintf("master_port:%d\r", m.Port)) ||
			!strings.Contains(info, "master_link_status:up") {
			return nil, fmt.Errorf("%s is not an up-to-date replica of %s", r.Addr(), m.Addr())
		}
	}
	return m, nil
}

// KillMaster kills the current master by PID and returns it.
func (s *Sentinel) KillMaster(ctx context.Context) (*Server, error) {
	m, err := s.Master(ctx)
	if err != nil {
		return nil, err
	}
	return m, m.Kill()
}

// isRole checks that n answers ROLE with role.
func isRole(ctx context.Context, n *Server, role string) error {
	c := redis.NewClient(&redis.Options{Addr: n.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	res, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return fmt.Errorf("redistest: ROLE on %s: %w", n.Addr(), err)
	}
	if len(res) == 0 || res[0] != role {
		return fmt.Errorf("redistest: %s is not a %s (ROLE %v)", n.Addr(), role, res)
	}
	return nil
}

func (s *Sentinel) node(addr string) *Server {
	for _, n := range s.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// logs returns the tails of every process's logs.
func (s *Sentinel) logs() string {
	var b strings.Builder
	for _, n := range s.Nodes {
		fmt.Fprintf(&b, "=== redis-server %s ===\n%s", n.Addr(), logTail(n.Dir, nil))
	}
	for _, sp := range s.sentinels {
		fmt.Fprintf(&b, "=== sentinel %s ===\n%s", sp.addr(), logTail(sp.dir, nil))
	}
	return b.String()
}

// Close kills every process by PID and removes the directories. It is
// idempotent.
func (s *Sentinel) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		for _, sp := range s.sentinels {
			errs = append(errs, kill(sp.p))
			if err := os.RemoveAll(sp.dir); err != nil {
				errs = append(errs, err)
			}
		}
		for _, n := range s.Nodes {
			errs = append(errs, n.Close())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
