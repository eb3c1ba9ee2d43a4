// resend.go owns the re-sending of recent releases after a master change:
// a fixed ring of the releases a reply confirmed, the dial hook that sees
// the Client reach a new master, and the background pass that sends those
// releases again there.

package engine

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/redis/go-redis/v9"
)

// resendRingSize is how many recent releases a Client keeps for a resend:
// the newest, whatever the window.
const resendRingSize = 2048

// resendSettle is how long after a master change a second pass resends
// the releases confirmed meanwhile: replies on connections to the old
// master still in flight when the Client dialled the new one.
const resendSettle = time.Second

// recentRelease is one confirmed release: the lease (its release call)
// and the value it released, and when.
type recentRelease struct {
	l     *Lease
	value string
	at    time.Time
}

// resender keeps the recent releases of a Client whose go-redis client
// follows one master (a Sentinel failover client), and
// sends them again when a connection reaches another address than the
// last one: a master that accepted them just before a failover may have
// lost them. A resend is harmless: a release is token-checked, a token is
// never granted twice, and a key that holds another token is untouched.
type resender struct {
	e      *Engine
	window time.Duration

	// rdb is the Sentinel client, which the watch pings (see watch).
	rdb *redis.Client

	mu       sync.Mutex
	ring     []recentRelease // nil once the Client closed
	next     int             // where the next release goes
	master   string          // remote address of the last connection
	last     time.Time       // the last release recorded
	watching bool            // a watch runs
}

// newResender installs a resender on rdb if it is a Sentinel client and
// window is positive; else it returns nil.
func newResender(e *Engine, rdb redis.UniversalClient, window time.Duration) *resender {
	c, ok := rdb.(*redis.Client)
	if !ok || window <= 0 || c.Options().Addr != "FailoverClient" { // go-redis's name for NewFailoverClient's
		return nil
	}
	r := &resender{e: e, window: window, ring: make([]recentRelease, resendRingSize), rdb: c}
	c.AddHook(r)
	return r
}

// record keeps a release of value by l confirmed now, if l's protocol
// may send it again (see ResendTeller). The caller holds no lease's mu.
func (r *resender) record(l *Lease, value string) {
	if r == nil {
		return
	}
	if _, ok := l.proto.(ResendTeller); !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	if r.ring == nil {
		r.mu.Unlock()
		return
	}
	r.ring[r.next] = recentRelease{l: l, value: value, at: now}
	r.next = (r.next + 1) % len(r.ring)
	r.last = now
	start := r.rdb != nil && !r.watching
	r.watching = r.watching || start
	r.mu.Unlock()
	if start && !r.e.goBackground(r.watch) {
		r.mu.Lock()
		r.watching = false
		r.mu.Unlock()
	}
}

// resendWatchEvery is how often a Sentinel client is pinged while it made
// a release within the window.
const resendWatchEvery = 200 * time.Millisecond

// watch pings a Sentinel client every resendWatchEvery until no release
// was made within the window: a go-redis Sentinel client that hears of a
// failover drops its connections to the old master, and the ping dials
// the new one (see dialled), also when the Client has nothing else to
// send.
func (r *resender) watch() {
	t := time.NewTicker(resendWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-r.e.closing:
			r.stopWatch(true)
			return
		}
		if r.stopWatch(false) {
			return
		}
		ctx, cancel := context.WithTimeout(rexec.OutlivingClose(context.Background()), time.Second)
		_ = r.rdb.Ping(ctx).Err()
		cancel()
	}
}

// stopWatch ends the watch if now, or if no release was made within the
// window, and reports whether it did.
func (r *resender) stopWatch(now bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now || r.ring == nil || time.Since(r.last) > r.window {
		r.watching = false
		return true
	}
	return false
}

// close drops the ring: the hook stays on the go-redis client, which may
// outlive the Client, and does nothing more.
func (r *resender) close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.ring = nil
	r.mu.Unlock()
}

// DialHook watches every new connection's remote address: one that
// differs from the last one's is a master change (a Sentinel client dials
// only the master it was told of).
func (r *resender) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err == nil && conn != nil && conn.RemoteAddr() != nil {
			r.dialled(conn.RemoteAddr().String())
		}
		return conn, err
	}
}

func (r *resender) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (r *resender) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// dialled records a connection to addr; the first to a new master starts
// the resend. The go-redis client may have dialled the old master before
// the hook was installed: on a Sentinel client, the first connection the
// hook sees after a release counts as a new master too (at worst, one
// needless resend).
func (r *resender) dialled(addr string) {
	r.mu.Lock()
	was := r.master
	changed := was != addr && r.ring != nil && (was != "" || r.rdb != nil && r.ring[0].l != nil)
	r.master = addr
	r.mu.Unlock()
	if changed {
		r.e.log.Info("dlock: new master; sending recent releases again", "addr", addr, "was", was, "within", r.window)
		r.e.goBackground(r.resend)
	}
}

// resend sends again every release confirmed within the window before
// now, then, after resendSettle, those confirmed since.
func (r *resender) resend() {
	now := time.Now()
	r.sendSince(now.Add(-r.window))
	t := time.NewTimer(resendSettle)
	defer t.Stop()
	select {
	case <-t.C:
		r.sendSince(now)
	case <-r.e.closing:
	}
}

// resendWorkers bounds the releases one pass has in flight.
const resendWorkers = 16

// sendSince sends again each recorded release confirmed at or after from,
// whose lease has not reached its deadline (past it, the key expired),
// concurrently, the whole pass bounded by ReleaseTimeout.
func (r *resender) sendSince(from time.Time) {
	ctx, cancel := context.WithTimeout(rexec.OutlivingClose(context.Background()), r.e.releaseTimeout)
	defer cancel()
	r.mu.Lock()
	var todo []recentRelease
	for _, rr := range r.ring {
		if rr.l != nil && !rr.at.Before(from) {
			todo = append(todo, rr)
		}
	}
	r.mu.Unlock()
	sem := make(chan struct{}, resendWorkers)
	var wg sync.WaitGroup
	for _, rr := range todo {
		if !time.Now().Before(rr.l.Deadline()) || ctx.Err() != nil {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r.sendOne(ctx, rr)
		}()
	}
	wg.Wait()
}

// sendOne sends one release again until it answers, within ctx (see
// releaseRetry); Stats.ReleasesResent counts it. The reply does not tell
// a release lost with the old master from one the new master has (both
// answer released: the key, or the tombstone of the token, is there), so
// it is not looked at. A release that ran is not sent again for a
// missing replica acknowledgement (MinReplicas).
func (r *resender) sendOne(ctx context.Context, rr recentRelease) {
	r.e.Stats.ReleasesResent.Add(1)
	for back := 10 * time.Millisecond; ; back = min(2*back, 500*time.Millisecond) {
		code, err := rr.l.releaseOnce(ctx, rr.value)
		if code == codeOK {
			return
		}
		if !retryableRelease(ctx, err) {
			return
		}
		t := time.NewTimer(back)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}
