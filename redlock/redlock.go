package redlock

import (
	"cmp"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"github.com/dlock-go/dlock/internal/defaults"
	mrand "math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/dlock-go/dlock/internal/oneline"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/acquire.lua
	acquireSrc string
	//go:embed scripts/fence.lua
	fenceSrc string
	//go:embed scripts/renew.lua
	renewSrc string
	//go:embed scripts/release.lua
	releaseSrc string

	acquireScript = lualib.Script(acquireSrc)
	fenceScript   = lualib.Script(fenceSrc)
	renewScript   = lualib.Script(renewSrc)
	releaseScript = lualib.Script(releaseSrc)
)

var (
	// ErrNoQuorum: fewer than a majority of the nodes answered (they are
	// down, partitioned or slower than the node timeout), so the outcome is
	// unknown. The engine reports it wrapped in dlock.ErrUnavailable for an
	// acquire, and as dlock.ErrUnreachable once a held lock's deadline passes
	// without a renewal reaching a majority. The error is a *QuorumError.
	ErrNoQuorum = errors.New("redlock: no majority of the nodes answered")

	// ErrTooSlow: a majority granted the lock, but so late that no validity
	// was left (the requests took longer than TTL minus the drift). The lock
	// was released everywhere.
	ErrTooSlow = errors.New("redlock: acquiring took longer than the lock's validity")
)

// QuorumError reports an operation that could not reach a majority of the
// nodes. It matches ErrNoQuorum. It does not unwrap to the node errors, so
// an error reply from one node is never mistaken for a definite answer of
// the whole set.
type QuorumError struct {
	Op       string  // "acquire", "fence", "renew" or "release"
	Answered int     // nodes that gave a definite reply
	Quorum   int     // nodes needed
	Nodes    int     // nodes in the set
	NodeErrs []error // per node: its error, nil if it answered
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redlock: %s: %d of %d nodes answered, %d needed", e.Op, e.Answered, e.Nodes, e.Quorum)
	for i, err := range e.NodeErrs {
		if err != nil {
			fmt.Fprintf(&b, "; node %d: %s", i, oneline.Msg(err))
		}
	}
	return b.String()
}

func (e *QuorumError) Is(target error) bool { return target == ErrNoQuorum }

// Options configures a Protocol. The zero value is valid: every field's
// default is stated next to it.
type Options struct {
	// NodeTimeout bounds every request to one node: a node that has not
	// answered by then counts as failed for that operation (its request may
	// still land: acquires clean up after themselves). Keep it small
	// compared with the TTL: the time it takes comes out of the validity.
	// Default: a tenth of the lock's TTL, at least 2ms and at most 50ms.
	//
	// go-redis cuts a request short at its context's deadline only if the
	// node's client has ContextTimeoutEnabled; otherwise the request runs
	// until the client's ReadTimeout in the background, while the Protocol
	// has long moved on.
	NodeTimeout time.Duration

	// RetryJitter: after a split vote (several callers took some nodes
	// each, nobody a majority) every caller releases what it took and
	// retries after a random delay of up to RetryJitter, so that they do
	// not collide again. Default: 50ms.
	RetryJitter time.Duration

	// DriftFactor and MinDrift make the clock-drift allowance subtracted
	// from the validity (TTL*DriftFactor + MinDrift); an acquire that took
	// longer than the rest of the TTL fails with ErrTooSlow. Set them like
	// the dlock.Client's Options (NewClient does): the Client computes the
	// lock's Deadline with its own. Defaults: 0.01 and 2ms, like dlock's.
	// A negative value means zero.
	DriftFactor float64
	MinDrift    time.Duration

	// AllowEviction lets locks be taken although a node may evict keys
	// under memory pressure (a maxmemory-policy other than noeviction): an
	// evicted lock key on a majority of nodes lets a second owner in. By
	// default (false) CheckServers returns, and Acquire fails with,
	// dlock.ErrEvictionPolicy once a node is known to evict. NewClient
	// sets it when the dlock.Options do.
	AllowEviction bool
}

// DefaultRetryJitter is the default Options.RetryJitter.
const DefaultRetryJitter = 50 * time.Millisecond

// Protocol is the Redlock algorithm over a fixed set of independent Redis
// masters, as a protocol.DirectProtocol: pass it to a dlock.Client's Lock,
// TryLock or Do with dlock.WithProtocol. It is safe for concurrent use.
type Protocol struct {
	nodes  []redis.UniversalClient
	quorum int
	opts   Options

	idMu    sync.Mutex
	runIDs  []string  // each node's INFO server run_id, once it answered
	idErr   error     // a *SameServerError, once found: every Acquire fails with it
	probing bool      // a background identity probe is running
	probed  time.Time // when the last one started
	// policies[i] is "ok" once node i's masters answered with
	// noeviction, or an error evicting says which evict; "": not known.
	policies []string
	evictErr error // a *dlock.EvictionError, once a node evicts
}

// ErrSameServer: two nodes are one Redis server (the same run_id in INFO
// server), reached under two addresses (127.0.0.1 and localhost, a DNS
// alias, a proxy): a majority of the nodes would not be a majority of
// servers. It matches dlock.ErrInvalidOpts (and dlock.ErrInvalidArgument).
var ErrSameServer = fmt.Errorf("%w: two redlock nodes are one Redis server", dlock.ErrInvalidOpts)

// SameServerError names the two nodes that are one server. It matches
// ErrSameServer.
type SameServerError struct {
	I, J  int    // the nodes' indexes
	RunID string // the server's INFO run_id
	AddrI string // the nodes' addresses, as their clients were given them
	AddrJ string
}

func (e *SameServerError) Error() string {
	return oneline.String(fmt.Sprintf("%v: nodes %d (%s) and %d (%s) have the same run_id %s", ErrSameServer, e.I, e.AddrI, e.J, e.AddrJ, e.RunID))
}

func (e *SameServerError) Is(target error) bool { return target == ErrSameServer }
func (e *SameServerError) Unwrap() error        { return ErrSameServer }

// CheckServers asks every node whose identity is not known yet for it
// (INFO server: run_id) and returns a *SameServerError if two nodes are one
// server; call it after New to refuse such a configuration at start-up.
// Nodes that do not answer are asked again at the next call. Acquire also
// asks the nodes not heard from, in the background (it never waits for
// the answer), and fails once two nodes are known to be one server (the
// error is then final); a lock granted before the answers came was taken
// on whatever majority answered. Only *redis.Client nodes (plain
// and Sentinel failover clients) are checked: a Cluster node answers from
// any of its masters. Each node has at most 2s (or ctx) to answer.
//
// It also reads the maxmemory-policy of every node (each master of a
// Cluster node) whose policy is not known yet, and returns a
// *dlock.EvictionError (matching dlock.ErrEvictionPolicy) if one may
// evict keys, unless Options.AllowEviction; Acquire's background probe
// reads them too, and Acquire fails with that error once it is found. A
// policy is read once per node: a failover inside a node, or a CONFIG SET
// after, is not seen.
func (p *Protocol) CheckServers(ctx context.Context) error {
	if err := p.checkServers(ctx, 2*time.Second); err != nil {
		return err
	}
	return p.checkPolicies(ctx, 2*time.Second)
}

func (p *Protocol) checkServers(ctx context.Context, timeout time.Duration) error {
	p.idMu.Lock()
	if p.idErr != nil || !slices.Contains(p.runIDs, "") {
		defer p.idMu.Unlock()
		return p.idErr
	}
	ids := slices.Clone(p.runIDs)
	p.idMu.Unlock()

	var wg sync.WaitGroup
	for i, n := range p.nodes {
		c, ok := n.(*redis.Client)
		if ids[i] != "" || !ok {
			ids[i] = cmp.Or(ids[i], "-") // "-": not checkable
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if info, err := c.Info(ctx, "server").Result(); err == nil {
				ids[i] = runIDOf(info)
			}
		}()
	}
	wg.Wait()

	p.idMu.Lock()
	for i, id := range ids {
		if p.runIDs[i] == "" {
			p.runIDs[i] = id
		}
	}
	p.idMu.Unlock()
	return p.sameServer()
}

// sameServer returns the *SameServerError found so far, checking the
// identities known now.
func (p *Protocol) sameServer() error {
	p.idMu.Lock()
	defer p.idMu.Unlock()
	if p.idErr != nil {
		return p.idErr
	}
	for i := range p.runIDs {
		for j := i + 1; j < len(p.runIDs); j++ {
			if id := p.runIDs[i]; id != "" && id != "-" && id == p.runIDs[j] {
				p.idErr = &SameServerError{I: i, J: j, RunID: id, AddrI: addrOf(p.nodes[i]), AddrJ: addrOf(p.nodes[j])}
				return p.idErr
			}
		}
	}
	return nil
}

// runIDOf returns the run_id line of an INFO server reply ("" if none).
func runIDOf(info string) string {
	for l := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "run_id:"); ok {
			return v
		}
	}
	return ""
}

// probeIDs asks the nodes whose identity is not known for it in the
// background (one probe at a time, at most once a second), so that Acquire
// never waits for it: a duplicate found fails every later Acquire.
func (p *Protocol) probeIDs() {
	p.idMu.Lock()
	defer p.idMu.Unlock()
	known := !slices.Contains(p.runIDs, "") && !slices.Contains(p.policies, "")
	if p.idErr != nil || p.probing || known || time.Since(p.probed) < time.Second {
		return
	}
	p.probing, p.probed = true, time.Now()
	go func() {
		_ = p.checkServers(context.Background(), 2*time.Second)
		_ = p.checkPolicies(context.Background(), 2*time.Second)
		p.idMu.Lock()
		p.probing = false
		p.idMu.Unlock()
	}()
}

func addrOf(n redis.UniversalClient) string {
	if c, ok := n.(*redis.Client); ok {
		return c.Options().Addr
	}
	return "?"
}

var _ protocol.DirectProtocol = (*Protocol)(nil)

// New returns a Protocol over nodes: an odd number, at least 3, of clients
// of independent Redis masters (no replication between them). A node may
// be a *redis.Client, a Sentinel failover client or a *redis.ClusterClient,
// but a failover inside a node can lose that node's part of a lock: see the
// package doc. New makes no Redis call and does not close the nodes.
//
// Errors match dlock.ErrInvalidArgument: a nil node, an even number of
// nodes or fewer than 3, two *redis.Client nodes with the same address, a
// negative option. Two addresses of one server are found by their
// identity when the nodes first answer (see CheckServers).
func New(nodes []redis.UniversalClient, opts Options) (*Protocol, error) {
	if len(nodes) < 3 || len(nodes)%2 == 0 {
		return nil, fmt.Errorf("%w: redlock needs an odd number of nodes, at least 3 (got %d)", dlock.ErrInvalidOpts, len(nodes))
	}
	seen := map[string]bool{}
	for i, n := range nodes {
		if n == nil || isNilPointer(n) {
			return nil, fmt.Errorf("%w: node %d", dlock.ErrNilClient, i)
		}
		if c, ok := n.(*redis.Client); ok {
			addr := c.Options().Addr
			if seen[addr] {
				return nil, fmt.Errorf("%w: two nodes on %s: a majority of nodes must be a majority of servers", dlock.ErrInvalidOpts, addr)
			}
			seen[addr] = true
		}
	}
	if opts.NodeTimeout < 0 || opts.RetryJitter < 0 {
		return nil, fmt.Errorf("%w: negative NodeTimeout or RetryJitter", dlock.ErrInvalidOpts)
	}
	if opts.RetryJitter == 0 {
		opts.RetryJitter = DefaultRetryJitter
	}
	switch {
	case opts.DriftFactor == 0:
		opts.DriftFactor = defaults.DriftFactor
	case opts.DriftFactor < 0:
		opts.DriftFactor = 0
	}
	switch {
	case opts.MinDrift == 0:
		opts.MinDrift = defaults.MinDrift
	case opts.MinDrift < 0:
		opts.MinDrift = 0
	}
	return &Protocol{nodes: slices.Clone(nodes), quorum: len(nodes)/2 + 1, opts: opts,
		runIDs: make([]string, len(nodes)), policies: make([]string, len(nodes))}, nil
}

func isNilPointer(n redis.UniversalClient) bool {
	switch c := n.(type) {
	case *redis.Client:
		return c == nil
	case *redis.ClusterClient:
		return c == nil
	case *redis.Ring:
		return c == nil
	}
	return false
}

// NewClient returns a Protocol over nodes and a dlock.Client over nodes[0]
// to use it with: its watchdog renews the Protocol's locks, and its pub/sub
// connection to nodes[0] hears the release of a lock, which every node
// publishes. If nodes[0] is down, waiters still get the lock, by their
// fallback retries (dlock.Options.RetryInterval). Zero drift options of
// opts are taken from copts, and so is AllowEviction if set. The caller
// closes the Client, then the nodes.
func NewClient(nodes []redis.UniversalClient, opts Options, copts dlock.Options) (*dlock.Client, *Protocol, error) {
	if opts.DriftFactor == 0 {
		opts.DriftFactor = copts.DriftFactor
	}
	if opts.MinDrift == 0 {
		opts.MinDrift = copts.MinDrift
	}
	opts.AllowEviction = opts.AllowEviction || copts.AllowEviction
	p, err := New(nodes, opts)
	if err != nil {
		return nil, nil, err
	}
	c, err := dlock.New(nodes[0], copts)
	if err != nil {
		return nil, nil, err
	}
	return c, p, nil
}

// Quorum returns the number of nodes a lock needs: a majority.
func (p *Protocol) Quorum() int { return p.quorum }

// Nodes returns the number of nodes.
func (p *Protocol) Nodes() int { return len(p.nodes) }

func (p *Protocol) nodeTimeout(ttl time.Duration) time.Duration {
	if p.opts.NodeTimeout > 0 {
		return p.opts.NodeTimeout
	}
	return min(50*time.Millisecond, max(ttl/10, 2*time.Millisecond))
}

func (p *Protocol) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*p.opts.DriftFactor) + p.opts.MinDrift
}

// fenceTTL is how long a node's fence counter outlives a grant or renewal,
// as in the core: the counter may expire after that, and the node then
// reports its TIME in microseconds, above every token handed out before.
func fenceTTL(ttl time.Duration) time.Duration { return ttl + 10*time.Second }

// Reply codes of the scripts, the same as dlock's.
const (
	codeOK        = 1
	codeGone      = 0
	codeOther     = -1
	codeWrongType = -2
)

// reply is one node's answer. answered is false if no reply came in time.
type reply struct {
	answered bool
	err      error
	code     int64
	n        int64  // acquire, held: the holder's PTTL in ms
	s        string // acquire: the fence counter (taken) or the holder's value (held)
}

// ok reports a definite success reply.
func (r reply) ok() bool { return r.answered && r.err == nil && r.code == codeOK }

// definite reports a reply that is not an error (success or not).
func (r reply) definite() bool { return r.answered && r.err == nil }

// fanout sends job to the nodes in which (nil: every node) at once. Each
// request's context ends after timeout (or with ctx). fanout returns the
// replies it has (answered false for the others) as soon as stop says so
// (nil: never), every node has replied, or wait has passed. A reply that
// arrives after fanout returned is handed to late (if not nil), on the
// goroutine of its request.
func (p *Protocol) fanout(ctx context.Context, which []int, timeout, wait time.Duration,
	job func(context.Context, redis.UniversalClient) reply, stop func([]reply) bool, late func(int, reply)) []reply {
	if which == nil {
		which = make([]int, len(p.nodes))
		for i := range which {
			which[i] = i
		}
	}
	type indexed struct {
		i int
		r reply
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	ch := make(chan indexed, len(which)) // never blocks a sender
	var (
		mu       sync.Mutex // guards finished and orders the sends before it
		finished bool
		wg       sync.WaitGroup
	)
	for _, i := range which {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := job(rctx, p.nodes[i])
			r.answered = true
			mu.Lock()
			if !finished {
				ch <- indexed{i, r}
				mu.Unlock()
				return
			}
			mu.Unlock()
			if late != nil {
				late(i, r)
			}
		}()
	}
	go func() { wg.Wait(); cancel() }()

	out := make([]reply, len(p.nodes))
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var why error // why some replies are missing
collect:
	for range which {
		select {
		case x := <-ch:
			out[x.i] = x.r
			if stop != nil && stop(out) {
				why = errors.New("no reply yet when the outcome was decided")
				break collect
			}
		case <-timer.C:
			why = fmt.Errorf("no reply within %v", wait)
			break collect
		case <-ctx.Done():
			why = ctx.Err()
			break collect
		}
	}
	mu.Lock()
	finished = true
	mu.Unlock()
	for { // replies sent before finished was set arrived in time
		select {
		case x := <-ch:
			out[x.i] = x.r
		default:
			for _, i := range which {
				if !out[i].answered {
					out[i].err = why
				}
			}
			return out
		}
	}
}

// Attempt states, for replies that arrive after Acquire returned.
const (
	undecided int32 = iota
	granted
	failed
)

// Acquire makes one Redlock attempt: SET NX PX on every node at once with a
// value unique to the attempt; with a majority, the grant's fencing token is
// written back to a majority; otherwise, and on any failure after that,
// what was taken is released again. The engine dates the validity from
// before this call; Acquire fails with ErrTooSlow if none was left. rdb and
// token are not used.
//
// Not acquired (no error): a majority answered and some other value holds
// enough nodes to block a majority (HolderTTL: until enough of them expire),
// or nobody could get a majority (a split vote; HolderTTL: a random delay of
// up to Options.RetryJitter). Errors: a *QuorumError if fewer than a
// majority answered, ErrTooSlow, dlock.ErrWrongType if so many nodes hold a
// non-string that no majority is possible.
func (p *Protocol) Acquire(ctx context.Context, _ redis.UniversalClient, k protocol.Keys, _ string, ttl time.Duration) (protocol.Grant, error) {
	start := time.Now()
	nt := p.nodeTimeout(ttl)
	if err := p.refusal(); err != nil {
		return protocol.Grant{}, err
	}
	p.probeIDs()
	value := newValue()
	g := protocol.Grant{Value: value}
	var state atomic.Int32
	late := func(i int, r reply) {
		// Acquire gave up while this request was in flight: whatever it
		// took must go. (If the attempt was still undecided, the clean-up
		// of a failure covers this node, since it had not answered.)
		if state.Load() == failed && (r.err != nil && !neverSent(r.err) || r.code == codeOK) {
			p.cleanup(k, value, []int{i}, nt, false, "")
		}
	}
	rs := p.fanout(ctx, nil, nt, nt, func(ctx context.Context, n redis.UniversalClient) reply {
		return acquireOn(ctx, n, k, value, ttl)
	}, func(rs []reply) bool {
		// Done once granted, or once refused by a majority. A node that
		// failed does not end the wait: the others' answers decide between
		// "not acquired" and "no quorum".
		ok, refused := 0, 0
		for _, r := range rs {
			switch {
			case r.ok():
				ok++
			case r.definite():
				refused++
			}
		}
		return ok >= p.quorum || refused > len(p.nodes)-p.quorum
	}, late)

	var taken []int
	var fence uint64
	err := p.sameServer() // two nodes are known to be one server: keep nothing
	for i, r := range rs {
		if !r.ok() {
			continue
		}
		c, perr := strconv.ParseUint(r.s, 10, 64)
		if perr != nil {
			rs[i] = reply{answered: true, err: fmt.Errorf("redlock: bad fence counter %q", r.s)}
			continue
		}
		taken = append(taken, i)
		fence = max(fence, c)
	}
	if err == nil && len(taken) >= p.quorum {
		fence++
		if err = p.writeFence(ctx, k, value, fence, taken, ttl, nt); err == nil {
			if elapsed := time.Since(start); elapsed < ttl-p.drift(ttl) {
				state.Store(granted)
				g.Acquired, g.Fence = true, fence
				return g, nil
			}
			err = ErrTooSlow
		}
	}

	// Not granted: release what was taken, and what may have been (no
	// reply, or an error: the SET may have run), without waking waiters.
	state.Store(failed)
	var mine, unsure []int
	for i, r := range rs {
		switch {
		case r.ok():
			mine = append(mine, i)
		case !r.definite() && !neverSent(r.err):
			unsure = append(unsure, i)
		}
	}
	p.cleanup(k, value, mine, nt, true, "") // answered quickly: wait for it
	p.cleanup(k, value, unsure, nt, false, "")
	if err != nil {
		return g, err
	}
	definite, wrong := 0, 0
	for _, r := range rs {
		if r.definite() {
			definite++
			if r.code == codeWrongType {
				wrong++
			}
		}
	}
	switch {
	case wrong > len(p.nodes)-p.quorum:
		return g, dlock.ErrWrongType
	case definite < p.quorum:
		return g, quorumError("acquire", p.quorum, rs)
	}
	g.HolderTTL = p.holderTTL(rs)
	return g, nil
}

// acquireOn runs acquire.lua on one node.
func acquireOn(ctx context.Context, n redis.UniversalClient, k protocol.Keys, value string, ttl time.Duration) reply {
	return parseAcquire(protocol.Call{Script: acquireScript, Keys: []string{k.Lock, k.Fence},
		Args: []any{value, ttl.Milliseconds()}}.Run(ctx, n))
}

// parseAcquire reads the reply of acquire.lua.
func parseAcquire(cmd *redis.Cmd) reply {
	res, err := cmd.Slice()
	if err != nil {
		return reply{err: err}
	}
	bad := reply{err: fmt.Errorf("redlock: unexpected reply %v from the acquire script", res)}
	if len(res) < 2 {
		return bad
	}
	code, ok := res[0].(int64)
	if !ok {
		return bad
	}
	r := reply{code: code}
	switch code {
	case codeOK:
		if r.s, ok = res[1].(string); !ok {
			return bad
		}
	case codeGone:
		if len(res) < 3 {
			return bad
		}
		r.n, _ = res[1].(int64)
		r.s, _ = res[2].(string)
	case codeWrongType:
	default:
		return bad
	}
	return r
}

// writeFence raises the fence counter of the nodes in taken to fence, and
// returns nil once a majority did so while still holding value.
func (p *Protocol) writeFence(ctx context.Context, k protocol.Keys, value string, fence uint64, taken []int, ttl, nt time.Duration) error {
	f := strconv.FormatUint(fence, 10)
	count := func(rs []reply) (ok, no int) {
		for _, r := range rs {
			switch {
			case r.ok():
				ok++
			case r.answered:
				no++
			}
		}
		return ok, no
	}
	rs := p.fanout(ctx, taken, nt, nt, func(ctx context.Context, n redis.UniversalClient) reply {
		code, err := protocol.Call{Script: fenceScript, Keys: []string{k.Lock, k.Fence},
			Args: []any{value, f, fenceTTL(ttl).Milliseconds()}}.Run(ctx, n).Int64()
		return reply{code: code, err: err}
	}, func(rs []reply) bool {
		ok, no := count(rs)
		return ok >= p.quorum || len(taken)-no < p.quorum
	}, nil)
	if ok, _ := count(rs); ok >= p.quorum {
		return nil
	}
	for i := range rs {
		if !slices.Contains(taken, i) {
			rs[i] = reply{answered: true, err: errors.New("did not grant the lock")}
		}
	}
	return quorumError("fence", p.quorum, rs)
}

// neverSent reports an error that proves the request never reached the
// server: the connection could not be made. (A refused connection also
// means the server is not running: a retry has nothing to delete, and if it
// restarts with its data, what it kept expires within one TTL.)
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// settleWindow bounds how long a clean-up keeps retrying a node that gives
// no definite answer (down, paused, slow).
const settleWindow = 5 * time.Second

// cleanup deletes value on the nodes in which, publishing on channel ("":
// nothing, for the clean-up of an attempt that did not win, which must not
// wake every waiter at once). Each node is retried, with back-off, until it
// answers, refuses the connection, or settleWindow has passed: a request
// that was still in flight when the caller gave up (a paused or slow
// server) may land after the first delete, and a retry removes what it
// wrote. cleanup waits at most nt
// for the first replies if wait is set, and returns at once otherwise.
func (p *Protocol) cleanup(k protocol.Keys, value string, which []int, nt time.Duration, wait bool, channel string) {
	if len(which) == 0 {
		return
	}
	call := releaseCall(k, value, channel)
	w := nt
	if !wait {
		w = 0
	}
	p.fanout(context.Background(), which, settleWindow+nt, w, func(ctx context.Context, n redis.UniversalClient) reply {
		end := time.Now().Add(settleWindow)
		back := max(nt, 20*time.Millisecond)
		for {
			tctx, cancel := context.WithTimeout(ctx, nt)
			code, err := call.Run(tctx, n).Int64()
			cancel()
			if err == nil || neverSent(err) || time.Now().Add(back).After(end) {
				return reply{code: code, err: err}
			}
			time.Sleep(back)
			back = min(2*back, 500*time.Millisecond)
		}
	}, nil, nil)
}

func releaseCall(k protocol.Keys, value, channel string) protocol.Call {
	return protocol.Call{Script: releaseScript, Keys: []string{k.Lock}, Args: []any{value, channel}}
}

// holderTTL is how long a caller that was not granted the lock should wait
// before trying again: until enough of the keys of the value that blocks a
// majority expire (-1 if one has no TTL), or, if no value does (a split
// vote), a random delay.
func (p *Protocol) holderTTL(rs []reply) time.Duration {
	held := map[string][]int64{}
	for _, r := range rs {
		if r.definite() && r.code == codeGone {
			held[r.s] = append(held[r.s], r.n)
		}
	}
	for _, ttls := range held {
		// This holder keeps a majority out until k of its keys expire.
		k := p.quorum - (len(p.nodes) - len(ttls))
		if k <= 0 {
			continue
		}
		slices.SortFunc(ttls, func(a, b int64) int {
			switch {
			case a < 0 && b < 0:
				return 0
			case a < 0:
				return 1
			case b < 0:
				return -1
			}
			return int(a - b)
		})
		if t := ttls[k-1]; t >= 0 {
			return max(time.Duration(t)*time.Millisecond, time.Millisecond)
		}
		return -1
	}
	return time.Millisecond + mrand.N(p.opts.RetryJitter)
}

// Renew returns the call that renews value on ONE node; the engine uses
// RenewDirect, which runs it on every node.
func (p *Protocol) Renew(k protocol.Keys, value string, ttl time.Duration) (protocol.Call, string) {
	return protocol.Call{Script: renewScript, Keys: []string{k.Lock, k.Fence},
		Args: []any{value, ttl.Milliseconds(), fenceTTL(ttl).Milliseconds()}}, value
}

// Release returns the call that releases value on ONE node and publishes
// on k.Wake; the engine uses ReleaseDirect, which runs it on every node.
func (p *Protocol) Release(k protocol.Keys, value string) protocol.Call {
	return releaseCall(k, value, k.Wake)
}

// RenewDirect extends value on every node at once (compare-and-expire) and
// replies 1 if a majority extended it. If so many nodes report the key gone
// or held by another value that no majority is left, the lock is lost: it
// replies -1 if any node holds another value (dlock.ErrTaken), -2 if any
// holds a non-string, else 0 (dlock.ErrExpired), and deletes what is left
// of it. Otherwise (errors and timeouts in the way of a majority) it
// returns a *QuorumError: the engine retries until the lock's deadline,
// then reports dlock.ErrUnreachable. A node whose key expired is not taken
// again: a lock survives the loss of at most a minority over its lifetime.
func (p *Protocol) RenewDirect(ctx context.Context, k protocol.Keys, value string, ttl time.Duration) (string, int64, error) {
	nt := p.nodeTimeout(ttl)
	call, _ := p.Renew(k, value, ttl)
	rs := p.fanout(ctx, nil, nt, nt, func(ctx context.Context, n redis.UniversalClient) reply {
		code, err := call.Run(ctx, n).Int64()
		return reply{code: code, err: err}
	}, nil, nil)
	var ok, gone, other, wrong int
	var extended []int
	for i, r := range rs {
		if !r.definite() {
			continue
		}
		switch r.code {
		case codeOK:
			ok++
			extended = append(extended, i)
		case codeGone:
			gone++
		case codeOther:
			other++
		default:
			wrong++
		}
	}
	switch {
	case ok >= p.quorum:
		return value, codeOK, nil
	case gone+other+wrong > len(p.nodes)-p.quorum:
		p.cleanup(k, value, extended, nt, false, k.Wake)
		switch {
		case other > 0:
			return value, codeOther, nil
		case wrong > 0:
			return value, codeWrongType, nil
		}
		return value, codeGone, nil
	}
	return value, 0, quorumError("renew", p.quorum, rs)
}

// ReleaseDirect deletes value on every node at once (compare-and-delete;
// each node publishes on k.Wake). It replies 1 if it deleted the key on
// any node, else -1 if a node holds another value, -2 if one holds a
// non-string, else 0 (gone everywhere). If fewer than a majority answered
// it returns a *QuorumError instead: retry the Unlock.
func (p *Protocol) ReleaseDirect(ctx context.Context, k protocol.Keys, value string) (int64, error) {
	nt := p.nodeTimeout(time.Hour) // no TTL here: the default's ceiling
	call := p.Release(k, value)
	rs := p.fanout(ctx, nil, nt, nt, func(ctx context.Context, n redis.UniversalClient) reply {
		code, err := call.Run(ctx, n).Int64()
		return reply{code: code, err: err}
	}, nil, nil)
	var definite, deleted, other, wrong int
	var unsure []int
	for i, r := range rs {
		if !r.definite() {
			if !neverSent(r.err) {
				unsure = append(unsure, i)
			}
			continue
		}
		definite++
		switch r.code {
		case codeOK:
			deleted++
		case codeOther:
			other++
		case codeWrongType:
			wrong++
		}
	}
	// A node that did not answer may hold the key still, or get it from
	// an acquire request that is still on its way: keep trying it.
	p.cleanup(k, value, unsure, nt, false, k.Wake)
	switch {
	case definite < p.quorum:
		return 0, quorumError("release", p.quorum, rs)
	case deleted > 0:
		return codeOK, nil
	case other > 0:
		return codeOther, nil
	case wrong > 0:
		return codeWrongType, nil
	}
	return codeGone, nil
}

func quorumError(op string, quorum int, rs []reply) error {
	e := &QuorumError{Op: op, Quorum: quorum, Nodes: len(rs), NodeErrs: make([]error, len(rs))}
	for i, r := range rs {
		switch {
		case r.definite():
			e.Answered++
		case r.err != nil:
			e.NodeErrs[i] = r.err
		default:
			e.NodeErrs[i] = errors.New("no reply")
		}
	}
	return e
}

// newValue returns 128 random bits, base64url-encoded: 22 characters, like
// dlock's tokens (so package admin's Inspect reports KindToken).
func newValue() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
