package faults

import (
	"context"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// TestTopologies is the quick tier on replicated and multi-master
// topologies: Sentinel and Cluster failovers (one fresh topology per
// history), and Redlock over three independent servers. These histories
// have no single server-side view, so R1, L3 and L4 are not checked here.
func TestTopologies(t *testing.T) {
	for _, sc := range topologyScenarios() {
		t.Run(sc.topo+"/"+sc.name, func(t *testing.T) { runScenario(t, sc, sc.rounds) })
	}
}

func topologyScenarios() []scenario {
	return []scenario{
		{topo: "sentinel", name: "failover unreplicated (canary)", rounds: 1, run: sentinelFailover(0),
			must: []invariant{invS1}, may: []invariant{invS3},
			note: "grant not replicated (replicas stopped), master SIGKILLed, replica promoted" + fenceNote},
		{topo: "sentinel", name: "failover MinReplicas=1", rounds: 1, run: sentinelFailover(1),
			note: "the same with Options.MinReplicas 1: the grant is refused instead"},
		{topo: "sentinel", name: "zombie master (canary)", rounds: 1, run: sentinelZombie,
			must: []invariant{invS1}, may: []invariant{invS3},
			note: "master SIGSTOPped past down-after, failed over, resumed: a stale client still gets it"},
		{topo: "cluster", name: "failover unreplicated (canary)", rounds: 1, run: clusterFailover,
			must: []invariant{invS1}, may: []invariant{invS3},
			note: "3+3 cluster: grant not replicated, the key's master SIGKILLed, its replica promoted" + fenceNote},
		{topo: "cluster", name: "failovers MinReplicas=1", rounds: 1, run: clusterMinReplicasFailovers,
			note: "3+6 cluster, MinReplicas 1: CLUSTER FAILOVER with a lock held across it, then SIGKILL of the new master; grants resume at once"},
		reshardScenario("live reshard", reshardLocksQuick),
		{topo: "redlock", name: "minority blackholed", rounds: 1, run: redlockMinority,
			note: "3 nodes behind proxies, 4 workers; one node blackholed for 1s of 2s"},
		{topo: "redlock", name: "rotating majorities", rounds: 1, run: redlockRotating,
			note: "6 grants, each with a different node blackholed: fences must still increase"},
		{topo: "redlock", name: "immediate restart (canary)", rounds: 2, run: redlockRestart(false),
			must: []invariant{invS1, invS3}, mustAny: true,
			note: "holder on {n0,n1}; n1 restarted without persistence at once; other client takes {n1,n2}"},
		{topo: "redlock", name: "restart delayed by TTL", rounds: 1, run: redlockRestart(true),
			note: "the same, n1 kept down for a TTL before restarting (the spec's rule)"},
		{topo: "redlock", name: "clock jump (canary)", rounds: 2, run: redlockClockJump,
			must: []invariant{invS1, invS3}, mustAny: true,
			note: "holder on {n0,n1}; n1's TTLs shrunk (emulated forward clock step); other takes {n1,n2}"},
	}
}

// failoverNode returns a recorded dlock Client over rdb.
func (h *harness) topoNode(rdb redis.UniversalClient, opts dlock.Options) *node {
	h.t.Cleanup(func() { _ = rdb.Close() })
	return h.node(rdb, opts)
}

// lastErr returns the error text of the last failed operation of kind.
func (h *harness) lastErr(kind opKind) string {
	ev := h.hist.Events()
	for i := len(ev) - 1; i >= 0; i-- {
		if ev[i].Kind == kind && ev[i].Type != evInvoke && ev[i].Type != evOK {
			return ev[i].Err
		}
	}
	return ""
}

// cutReplication stops the replicas of master and breaks their links, so
// master's next writes are not replicated (correctness.md §4.4). k is a
// key master serves (on a Cluster, in its slots).
func (h *harness) cutReplication(master *redistest.Server, replicas []*redistest.Server, k string) {
	h.t.Helper()
	ctx := h.t.Context()
	mc := h.client(master.Addr(), true)
	// Everything so far reached the replicas: a write, then WAIT on the
	// same connection. A WAIT alone covers only its own connection's
	// writes, none on a fresh one, and answers at once with every
	// connected replica, whatever they have received.
	if n, err := waitReplicated(ctx, mc, "{"+k+"}:replicated", len(replicas)); err != nil || n < len(replicas) {
		h.t.Fatalf("WAIT before the cut: %d replicas, %v", n, err)
	}
	for _, r := range replicas {
		if err := r.Pause(); err != nil {
			h.t.Fatal(err)
		}
	}
	if err := mc.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		h.t.Fatal(err)
	}
}

// waitReplicated writes key on rdb's node and sends WAIT on the same
// connection (one pipeline), and returns how many replicas acknowledged:
// they have every write the node made before.
func waitReplicated(ctx context.Context, rdb *redis.Client, key string, replicas int) (int, error) {
	var wait *redis.Cmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, "1", time.Minute)
		wait = p.Do(ctx, "wait", replicas, 2000)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return wait.Int()
}

// canaryTTL is the TTL of the unreplicated grant in the failover canaries:
// its first renewal comes a third of it later, after the failover and B's
// take-over. With a shorter TTL a failover slowed by a busy machine let A's
// renewal reach the new master first: A learnt of the loss before B's grant,
// the intervals did not overlap, and the canary missed the S1 it exists to
// show.
const canaryTTL = 30 * time.Second

func sentinelFailover(minReplicas int) func(h *harness) {
	return func(h *harness) {
		ctx := h.t.Context()
		s := redistest.StartSentinel(h.t, redistest.SentinelConfig{})
		k := h.key("k")
		fo := func() *redis.Client {
			o := s.FailoverOptions()
			o.ContextTimeoutEnabled = true
			return redis.NewFailoverClient(o)
		}
		a := h.worker(h.topoNode(fo(), dlock.Options{MinReplicas: minReplicas}), true)
		b := h.worker(h.topoNode(fo(), dlock.Options{}), true)
		// A replicated grant first, so the replicas have the fence counter.
		if !a.Cycle(ctx, k, 10*time.Second, 3*time.Second, 1, 0) {
			h.t.Fatal("warm-up grant failed")
		}
		master, err := s.Master(ctx)
		if err != nil {
			h.t.Fatal(err)
		}
		var replicas []*redistest.Server
		for _, n := range s.Nodes {
			if n != master {
				replicas = append(replicas, n)
			}
		}
		start := clock.Now()
		h.cutReplication(master, replicas, k)
		lk := a.Acquire(ctx, k, canaryTTL, false)
		switch {
		case minReplicas == 0 && lk == nil:
			h.t.Fatal("A could not acquire")
		case minReplicas > 0 && lk != nil:
			h.t.Error("MinReplicas: an unreplicated grant was handed out")
		case minReplicas > 0 && !strings.Contains(h.lastErr(kindTry), "replicas"):
			h.t.Errorf("MinReplicas: the acquire failed with %q, want a replica acknowledgement error", h.lastErr(kindTry))
		}
		if lk != nil {
			a.Write(ctx, lk)
		}
		if err := master.Kill(); err != nil {
			h.t.Fatal(err)
		}
		for _, r := range replicas {
			_ = r.Resume()
		}
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = s.WaitFailover(fctx, master)
		cancel()
		if err != nil {
			h.t.Fatal(err)
		}
		h.nem.Span(kindFault, -1, "unreplicated grant, master SIGKILLed, failover", start, clock.Now())
		lb := h.takeOver(b, k, 10*time.Second)
		b.Write(ctx, lb)
		if lk != nil {
			select { // A learns at its next renewal on the new master
			case <-lk.Done():
			case <-time.After(canaryTTL):
				h.t.Error("A never learnt it had lost the lock")
			}
			_ = a.Release(ctx, lk)
		}
		_ = b.Release(ctx, lb)
	}
}

// takeOver makes w acquire k (TryLock, retried) within d.
func (h *harness) takeOver(w *worker, k string, d time.Duration) *dlock.Lock {
	h.t.Helper()
	ctx := h.t.Context()
	for end := time.Now().Add(d); time.Now().Before(end); sleep(50 * time.Millisecond) {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		lk := w.Acquire(actx, k, 10*time.Second, false)
		cancel()
		if lk != nil {
			return lk
		}
	}
	h.t.Fatalf("could not take %s over within %v", k, d)
	return nil
}

// sentinelZombie: the master is stopped long enough to be failed over,
// then resumed; until the sentinels demote it (seconds later) a client
// still connected to it can take a key the new master has granted.
func sentinelZombie(h *harness) {
	ctx := h.t.Context()
	s := redistest.StartSentinel(h.t, redistest.SentinelConfig{})
	k := h.key("k")
	master, err := s.Master(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	o := s.FailoverOptions()
	o.ContextTimeoutEnabled = true
	b := h.worker(h.topoNode(redis.NewFailoverClient(o), dlock.Options{}), true)
	stale := redis.NewClient(&redis.Options{Addr: master.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	a := h.worker(h.topoNode(stale, dlock.Options{}), true)
	start := clock.Now()
	if err := master.Pause(); err != nil {
		h.t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = s.WaitFailover(fctx, master)
	cancel()
	if err != nil {
		_ = master.Resume()
		h.t.Fatal(err)
	}
	lb := h.takeOver(b, k, 10*time.Second)
	b.Write(ctx, lb)
	if err := master.Resume(); err != nil {
		h.t.Fatal(err)
	}
	h.nem.Span(kindFault, -1, "master SIGSTOPped, failed over, resumed", start, clock.Now())
	la := h.takeOver(a, k, 3*time.Second) // the zombie grants it
	a.Write(ctx, la)
	sleep(200 * time.Millisecond)
	_ = a.Release(ctx, la)
	_ = b.Release(ctx, lb)
}

func clusterFailover(h *harness) {
	ctx := h.t.Context()
	cl := redistest.StartCluster(h.t, redistest.ClusterConfig{Replicas: 1})
	k := h.key("k")
	master, err := cl.MasterOf(ctx, k)
	if err != nil {
		h.t.Fatal(err)
	}
	replica := replicaOf(h, cl.Nodes, master)
	cc := func() *redis.ClusterClient {
		o := cl.ClusterOptions()
		o.ContextTimeoutEnabled = true
		return redis.NewClusterClient(o)
	}
	a := h.worker(h.topoNode(cc(), dlock.Options{}), true)
	b := h.worker(h.topoNode(cc(), dlock.Options{}), true)
	if !a.Cycle(ctx, k, 10*time.Second, 3*time.Second, 1, 0) {
		h.t.Fatal("warm-up grant failed")
	}
	start := clock.Now()
	h.cutReplication(master, []*redistest.Server{replica}, k)
	lk := a.Acquire(ctx, k, canaryTTL, false)
	if lk == nil {
		h.t.Fatal("A could not acquire")
	}
	a.Write(ctx, lk)
	if err := master.Kill(); err != nil {
		h.t.Fatal(err)
	}
	_ = replica.Resume()
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = cl.WaitFailover(fctx, k, master)
	cancel()
	if err != nil {
		h.t.Fatal(err)
	}
	h.nem.Span(kindFault, -1, "unreplicated grant, master SIGKILLed, failover", start, clock.Now())
	lb := h.takeOver(b, k, 10*time.Second)
	b.Write(ctx, lb)
	select { // A learns at its next renewal on the new master
	case <-lk.Done():
	case <-time.After(canaryTTL):
		h.t.Error("A never learnt it had lost the lock")
	}
	_ = a.Release(ctx, lk)
	_ = b.Release(ctx, lb)
}

// clusterMinReplicasFailovers: a Cluster with two replicas per master and
// Clients with MinReplicas 1, whose grants and renewals go straight to the
// key's master with WAIT after them, and whose go-redis slot maps reload
// only every minute (the default). Two workers contend for one key while
// another Client holds a lock in the same slot. A clean CLUSTER FAILOVER
// (the old master answers MOVED from then on): grants resume at once and
// the held lock is renewed on the new master, not lost. Then SIGKILL of
// the new master: its remaining replica is promoted, and grants resume as
// soon as the cluster has a master for the slot (releases that met the
// dead master are sent again there).
func clusterMinReplicasFailovers(h *harness) {
	ctx := h.t.Context()
	cl := redistest.StartCluster(h.t, redistest.ClusterConfig{Replicas: 2})
	held, k := h.key("{mr}held"), h.key("{mr}k")
	cc := func() *redis.ClusterClient {
		o := cl.ClusterOptions()
		o.ClusterStateReloadInterval = 0 // go-redis's default: a minute
		o.ContextTimeoutEnabled = true
		return redis.NewClusterClient(o)
	}
	opts := dlock.Options{MinReplicas: 1, ReplicaTimeout: time.Second}
	a := h.worker(h.topoNode(cc(), opts), true)
	ws := []*worker{h.worker(h.topoNode(cc(), opts), true), h.worker(h.topoNode(cc(), opts), true)}
	la := a.Acquire(ctx, held, 3*time.Second, false)
	if la == nil {
		h.t.Fatalf("the held lock: %s", h.lastErr(kindTry))
	}
	a.Write(ctx, la)

	var lastGrant atomic.Int64 // UnixNano of the workers' latest grant
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				lk := w.Acquire(actx, k, 2*time.Second, true)
				cancel()
				if lk == nil {
					sleep(20 * time.Millisecond)
					continue
				}
				lastGrant.Store(time.Now().UnixNano())
				w.Write(ctx, lk)
				sleep(10 * time.Millisecond)
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				_ = w.Release(rctx, lk)
				rcancel()
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	// resumed waits for a grant after from, and returns how long after
	// from it came.
	resumed := func(what string, from time.Time) time.Duration {
		for time.Since(from) < 20*time.Second {
			if g := time.Unix(0, lastGrant.Load()); g.After(from) {
				return g.Sub(from)
			}
			sleep(5 * time.Millisecond)
		}
		h.t.Fatalf("no grant within 20s of the %s", what)
		return 0
	}
	resumed("start", time.Now())

	// A clean failover: the master's replica takes over.
	master, err := cl.MasterOf(ctx, k)
	if err != nil {
		h.t.Fatal(err)
	}
	start := clock.Now()
	replica := h.client(replicaOf(h, cl.Nodes, master).Addr(), true)
	var nm *redistest.Server
	// A manual failover that does not complete within its 5s (a loaded
	// machine) is abandoned by Redis: ask again.
	for try := 0; nm == nil; try++ {
		if err := replica.Do(ctx, "cluster", "failover").Err(); err != nil {
			h.t.Fatal(err)
		}
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		nm, err = cl.WaitFailover(fctx, k, master)
		cancel()
		if err != nil && try == 2 {
			h.t.Fatal(err)
		}
	}
	done := time.Now()
	h.nem.Span(kindFault, -1, "CLUSTER FAILOVER", start, clock.Now())
	gap := resumed("clean failover", done)
	h.t.Logf("CLUSTER FAILOVER: grants resumed %v after the slot's new master answered", gap.Round(time.Millisecond))
	if gap > 5*time.Second {
		h.t.Errorf("grants resumed only %v after the clean failover", gap)
	}
	sleep(4 * time.Second) // the held lock's renewals, each on the new master
	if err := la.Err(); err != nil {
		h.t.Errorf("the lock held across the clean failover was lost: %v", err)
	}
	a.Write(ctx, la)
	_ = a.Release(ctx, la)

	// SIGKILL of the new master: one of its replicas takes over.
	start = clock.Now()
	if err := nm.Kill(); err != nil {
		h.t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := cl.WaitFailover(fctx, k, nm); err != nil {
		h.t.Fatal(err)
	}
	done = time.Now()
	h.nem.Span(kindFault, -1, "new master SIGKILLed, failover", start, clock.Now())
	gap = resumed("SIGKILL failover", done)
	h.t.Logf("SIGKILL: grants resumed %v after the slot's new master answered", gap.Round(time.Millisecond))
	if gap > 5*time.Second {
		h.t.Errorf("grants resumed only %v after the SIGKILL failover", gap)
	}
	sleep(500 * time.Millisecond)
}

// replicaOf finds the replica of master among nodes (ROLE).
func replicaOf(h *harness, nodes []*redistest.Server, master *redistest.Server) *redistest.Server {
	h.t.Helper()
	for _, n := range nodes {
		if n == master {
			continue
		}
		role, err := h.client(n.Addr(), true).Do(h.t.Context(), "role").Slice()
		if err == nil && len(role) >= 3 && role[0] == "slave" && role[2] == int64(master.Port) {
			return n
		}
	}
	h.t.Fatalf("no replica of %s", master.Addr())
	return nil
}

// redlockSet is one process's view of the Redlock nodes.
type redlockSet struct {
	node  *node
	proto *redlock.Protocol
}

// redlockNode makes a recorded Redlock Client over addrs (one go-redis
// client per node, failing fast, as the redlock package advises).
func (h *harness) redlockNode(addrs []string, ropts redlock.Options) redlockSet {
	return h.redlockNodeOpts(addrs, ropts, nil)
}

// redlockNodeWith is redlockNode with each node's client passed to setup
// before use (to add a hook).
func (h *harness) redlockNodeWith(addrs []string, setup func(*redis.Client)) redlockSet {
	return h.redlockNodeOpts(addrs, redlock.Options{}, setup)
}

func (h *harness) redlockNodeOpts(addrs []string, ropts redlock.Options, setup func(*redis.Client)) redlockSet {
	h.t.Helper()
	var nodes []redis.UniversalClient
	var closers []io.Closer
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true, MaxRetries: -1,
			DialTimeout: 250 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
		if setup != nil {
			setup(c)
		}
		nodes = append(nodes, c)
		closers = append(closers, c)
	}
	var p *redlock.Protocol
	n, err := newNodeWith(dlock.Options{}, clock, h.hist, func(o dlock.Options) (*dlock.Client, error) {
		c, proto, err := redlock.NewClient(nodes, ropts, o)
		p = proto
		return c, err
	}, closers...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = n.Close() })
	if n.Admin, err = admin.New(nodes[0], admin.Options{}); err != nil { // the node the Client's own calls go to
		h.t.Fatal(err)
	}
	return redlockSet{node: n, proto: p}
}

func (h *harness) redlockWorker(s redlockSet) *worker {
	w := h.worker(s.node, true)
	w.LockOpts = []dlock.LockOption{dlock.WithProtocol(s.proto)}
	return w
}

func startNodes(h *harness, n int) ([]*redistest.Server, []string) {
	var srvs []*redistest.Server
	var addrs []string
	for range n {
		s := redistest.Start(h.t, redistest.Config{})
		srvs = append(srvs, s)
		addrs = append(addrs, s.Addr())
	}
	return srvs, addrs
}

func redlockMinority(h *harness) {
	ctx := h.t.Context()
	_, addrs := startNodes(h, 3)
	var pxs []*redistest.Proxy
	var paddrs []string
	for _, a := range addrs {
		px := redistest.NewProxy(h.t, a)
		pxs = append(pxs, px)
		paddrs = append(paddrs, px.Addr())
	}
	k := h.key("k")
	sets := []redlockSet{h.redlockNode(paddrs, redlock.Options{}), h.redlockNode(paddrs, redlock.Options{})}
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for i := range 4 {
		w := h.redlockWorker(sets[i%2])
		wg.Go(func() {
			for time.Now().Before(stop) {
				w.Cycle(ctx, k, 500*time.Millisecond, 800*time.Millisecond, 2, 5*time.Millisecond)
			}
		})
	}
	sleep(400 * time.Millisecond)
	victim := pxs[h.rng.IntN(len(pxs))]
	h.nem.Do("one node blackholed 1s", func() {
		victim.Blackhole(true)
		sleep(time.Second)
		victim.Blackhole(false)
		victim.CutAll()
	})
	wg.Wait()
}

func redlockRotating(h *harness) {
	ctx := h.t.Context()
	_, addrs := startNodes(h, 3)
	var pxs []*redistest.Proxy
	var paddrs []string
	for _, a := range addrs {
		px := redistest.NewProxy(h.t, a)
		pxs = append(pxs, px)
		paddrs = append(paddrs, px.Addr())
	}
	k := h.key("k")
	w := h.redlockWorker(h.redlockNode(paddrs, redlock.Options{NodeTimeout: 100 * time.Millisecond}))
	for i := range 6 {
		px := pxs[i%3]
		h.nem.Do("blackhole node "+strconv.Itoa(i%3)+" for one grant", func() {
			px.Blackhole(true)
			// Lock retries for 5s: a loaded machine's nodes can miss the
			// 100ms node timeout for a while.
			if !w.Cycle(ctx, k, time.Second, 5*time.Second, 1, 0) {
				h.t.Errorf("grant %d with node %d blackholed failed: %s", i, i%3, h.lastErr(kindLock))
			}
			px.Blackhole(false)
			px.CutAll()
		})
	}
}

// redlockSplit: A (through proxies) takes k on {n0, n1} while n2 is
// blackholed for it. It returns A's worker, its lock, B's worker (direct
// clients) and the servers.
func redlockSplit(h *harness, ttl time.Duration) (*worker, *dlock.Lock, *worker, []*redistest.Server) {
	h.t.Helper()
	ctx := h.t.Context()
	srvs, addrs := startNodes(h, 3)
	var paddrs []string
	var pxs []*redistest.Proxy
	for _, a := range addrs {
		px := redistest.NewProxy(h.t, a)
		pxs = append(pxs, px)
		paddrs = append(paddrs, px.Addr())
	}
	k := h.key("k")
	a := h.redlockWorker(h.redlockNode(paddrs, redlock.Options{NodeTimeout: 100 * time.Millisecond}))
	b := h.redlockWorker(h.redlockNode(addrs, redlock.Options{NodeTimeout: 100 * time.Millisecond}))
	pxs[2].Blackhole(true)
	// A TryLock needs n0 and n1 to answer within the 100ms node timeout,
	// which a loaded machine can miss: a few attempts.
	var lk *dlock.Lock
	for i := 0; lk == nil && i < 5; i++ {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		lk = a.Acquire(actx, k, ttl, false)
		cancel()
	}
	pxs[2].Blackhole(false)
	pxs[2].CutAll()
	if lk == nil {
		h.t.Fatal("A could not acquire on {n0, n1}")
	}
	a.Write(ctx, lk)
	return a, lk, b, srvs
}

// redlockRestart: n1 loses A's key in a restart without persistence, at
// once (the majority is then there for B's taking) or after a TTL.
func redlockRestart(delayed bool) func(h *harness) {
	return func(h *harness) {
		ctx := h.t.Context()
		const ttl = time.Second
		a, lk, b, srvs := redlockSplit(h, ttl)
		k := lk.Key()
		if delayed {
			h.nem.Do("n1 SIGKILLed, restarted a TTL later, without persistence", func() {
				_ = srvs[1].Kill()
				// Meanwhile B cannot get a majority, and A cannot renew on one.
				for end := time.Now().Add(ttl + 100*time.Millisecond); time.Now().Before(end); sleep(50 * time.Millisecond) {
					actx, cancel := context.WithTimeout(ctx, time.Second)
					if lb := b.Acquire(actx, k, ttl, false); lb != nil {
						b.Write(ctx, lb)
						_ = b.Release(ctx, lb)
					}
					cancel()
				}
				if err := srvs[1].Restart(); err != nil {
					h.t.Fatal(err)
				}
			})
		} else {
			h.nem.Do("n1 SIGKILLed and restarted without persistence", func() {
				if err := srvs[1].Restart(); err != nil {
					h.t.Fatal(err)
				}
			})
		}
		lb := h.takeOver(b, k, 5*time.Second)
		b.Write(ctx, lb)
		if valid(lk) {
			a.Write(ctx, lk)
		}
		select {
		case <-lk.Done():
		case <-time.After(5 * time.Second):
			h.t.Error("A never learnt it had lost the lock")
		}
		_ = b.Release(ctx, lb)
		_ = a.Release(ctx, lk)
	}
}

// redlockClockJump: n1's clock "jumps" forward past A's TTL: emulated by
// shrinking the TTL of A's key there (libfaketime cannot run redis-server;
// correctness.md §4.5).
func redlockClockJump(h *harness) {
	ctx := h.t.Context()
	a, lk, b, srvs := redlockSplit(h, 2*time.Second)
	k := lk.Key()
	h.nem.Do("clock jump on n1 (TTLs shrunk)", func() {
		if err := h.client(srvs[1].Addr(), true).PExpire(ctx, k, time.Millisecond).Err(); err != nil {
			h.t.Fatal(err)
		}
		sleep(5 * time.Millisecond)
	})
	lb := h.takeOver(b, k, 5*time.Second)
	b.Write(ctx, lb)
	if valid(lk) {
		a.Write(ctx, lk)
	}
	select {
	case <-lk.Done():
	case <-time.After(5 * time.Second):
		h.t.Error("A never learnt it had lost the lock")
	}
	_ = b.Release(ctx, lb)
	_ = a.Release(ctx, lk)
}
