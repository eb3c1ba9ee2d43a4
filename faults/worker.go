package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/fenced"
	"github.com/redis/go-redis/v9"
)

// resKey returns the key of the protected resource written under lock key
// (on the resource's own Redis server).
func resKey(key string) string { return "res:" + key }

// node is one dlock Client as the suite drives it: its Renew hook records
// every watchdog renewal of the locks its workers hold.
type node struct {
	Locks *dlock.Client
	Admin *admin.Client // the admin Client of Locks' locks (on a Redlock node: of its first node)
	Clock *timeBase
	Rec   recorder

	closers []io.Closer
	mu      sync.Mutex
	held    map[heldKey][]*holding // by the first key and its fence (what RenewInfo names)
	byLock  map[*dlock.Lock]*holding
}

type heldKey struct {
	key   string
	fence uint64
}

// holding is one grant a worker holds.
type holding struct {
	w     *worker
	lk    *dlock.Lock
	ttl   time.Duration
	owner string   // the grant's identity in the history
	keys  []string // the keys it holds (several for LockMulti)
	spec  grantSpec
	last  int64 // the last deadline recorded (n.mu)
	lost  bool  // a failed renewal was recorded (n.mu)
}

// grantSpec is the kind of grant an acquire asks for; it is recorded on
// the grant for the checker, and chooses the typed dlock call that asks
// for it.
type grantSpec struct {
	Mode    string // modeExclusive, modeShared or modeSemaphore
	Owner   string // a reentrant owner ("": not reentrant)
	Limit   int    // a semaphore's limit
	Permits int    // a semaphore grant's permits (default 1)
}

// exclusiveSpec is a plain lock.
func exclusiveSpec() grantSpec { return grantSpec{} }

// sharedSpec is a read lock (dlock.RWLock's RLock).
func sharedSpec() grantSpec { return grantSpec{Mode: modeShared} }

// semSpec is permits of a semaphore of limit (dlock.Semaphore).
func semSpec(limit, permits int) grantSpec {
	return grantSpec{Mode: modeSemaphore, Limit: limit, Permits: permits}
}

// reentrantSpec is a reentrant handle of owner (dlock.Reentrant).
func reentrantSpec(owner string) grantSpec { return grantSpec{Owner: owner} }

// take acquires key on c as the kind of grant s describes; with wait
// false, in one attempt.
func (s grantSpec) take(ctx context.Context, c *dlock.Client, key string, wait bool, opts []dlock.LockOption) (*dlock.Lock, error) {
	switch {
	case s.Mode == modeShared && wait:
		return c.RWLock(key).RLock(ctx, opts...)
	case s.Mode == modeShared:
		return c.RWLock(key).TryRLock(ctx, opts...)
	case s.Mode == modeSemaphore:
		n := max(s.Permits, 1)
		if wait {
			return c.Semaphore(key, s.Limit).Acquire(ctx, n, opts...)
		}
		return c.Semaphore(key, s.Limit).TryAcquire(ctx, n, opts...)
	case s.Owner != "" && wait:
		return c.Reentrant(key).Lock(ctx, s.Owner, opts...)
	case s.Owner != "":
		return c.Reentrant(key).TryLock(ctx, s.Owner, opts...)
	case wait:
		return c.Lock(ctx, key, opts...)
	}
	return c.TryLock(ctx, key, opts...)
}

// group is how the history names a reentrant hold: namespaced, so that an
// owner id equal to another grant's token is still another group.
func (s grantSpec) group() string {
	if s.Owner == "" {
		return ""
	}
	return "reentrant:" + s.Owner
}

func (s grantSpec) event(e event) event {
	e.Mode, e.Group, e.Limit = s.Mode, s.group(), s.Limit
	if s.Mode == modeSemaphore {
		e.Permits = max(s.Permits, 1)
	}
	return e
}

// newNode makes a dlock Client over rdb whose renewals are recorded. The
// node owns rdb: Close closes both.
func newNode(rdb redis.UniversalClient, opts dlock.Options, clock *timeBase, rec recorder) (*node, error) {
	n, err := newNodeWith(opts, clock, rec, func(o dlock.Options) (*dlock.Client, error) { return dlock.New(rdb, o) }, rdb)
	if err != nil {
		return nil, err
	}
	o := n.Locks.Options()
	if n.Admin, err = admin.New(rdb, admin.Options{Prefix: o.Prefix, PickupTimeout: o.PickupTimeout}); err != nil {
		_ = n.Close()
		return nil, err
	}
	return n, nil
}

// newNodeWith makes a node whose Client mk builds from opts (with the
// recording hook added), for Clients built another way (redlock.NewClient).
// Close closes the Client, then closers.
func newNodeWith(opts dlock.Options, clock *timeBase, rec recorder, mk func(dlock.Options) (*dlock.Client, error), closers ...io.Closer) (*node, error) {
	n := &node{Clock: clock, Rec: rec, closers: closers, held: map[heldKey][]*holding{}, byLock: map[*dlock.Lock]*holding{}}
	c, err := mk(opts)
	if err != nil {
		return nil, err
	}
	c.AddHooks(dlock.Hooks{Renew: n.onRenew}) // after opts.Hooks, which it leaves alone
	n.Locks = c
	return n, nil
}

// Close closes the dlock Client (releasing what it holds) and what the
// node owns.
func (n *node) Close() error {
	errs := []error{n.Locks.Close()}
	for _, c := range n.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// drift is the Client's drift allowance for ttl (see dlock.Options).
func (n *node) drift(ttl time.Duration) time.Duration {
	o := n.Locks.Options()
	return time.Duration(float64(ttl)*o.DriftFactor) + o.MinDrift
}

func (n *node) add(h *holding) {
	k := heldKey{h.keys[0], h.lk.FenceOf(h.keys[0])}
	n.mu.Lock()
	n.held[k] = append(n.held[k], h)
	n.byLock[h.lk] = h
	n.mu.Unlock()
}

func (n *node) remove(h *holding) {
	k := heldKey{h.keys[0], h.lk.FenceOf(h.keys[0])}
	n.mu.Lock()
	n.held[k] = slices.DeleteFunc(n.held[k], func(x *holding) bool { return x == h })
	if len(n.held[k]) == 0 {
		delete(n.held, k)
	}
	delete(n.byLock, h.lk)
	n.mu.Unlock()
}

// holdingOf returns what the history knows of lk (nil: not recorded).
func (n *node) holdingOf(lk *dlock.Lock) *holding {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.byLock[lk]
}

// onRenew records a watchdog renewal of a lock a worker holds. A renewal
// that succeeded moved the deadline to its send time + TTL - drift, which
// gives the send time. A renewal that found the lock gone is recorded as
// failed; one whose outcome is unknown (a Redis error, a reply too late)
// is not recorded. The hook names a key and a fence; the handles of one
// reentrant hold share them, so the handle renewed is the one whose
// deadline moved (or which was lost).
func (n *node) onRenew(_ context.Context, info dlock.RenewInfo) {
	now := n.Clock.Now()
	var evs []event
	n.mu.Lock()
	hs := n.held[heldKey{info.Key, info.Fence}]
	for _, h := range hs {
		base := event{ID: 0, Proc: h.w.Proc, T: now, Kind: kindRenew, Owner: h.owner,
			TTL: int64(h.ttl), Drift: int64(n.drift(h.ttl))}
		switch {
		case info.Err == nil:
			dl := n.Clock.At(h.lk.Deadline())
			if dl <= h.last && len(hs) > 1 {
				continue
			}
			h.last = max(h.last, dl)
			base.Type = evOK
			base.Deadline = dl
			base.Sent = dl - int64(h.ttl-n.drift(h.ttl))
			base.Call = base.Sent
		case errors.Is(info.Err, dlock.ErrLost):
			if h.lost || (len(hs) > 1 && h.lk.Err() == nil) || h.w.Unique {
				continue // (legacy: may be the documented false alarm)
			}
			h.lost = true
			base.Type, base.Call, base.Err = evFail, now, info.Err.Error()
		default:
			continue
		}
		for _, k := range h.keys {
			e := base
			e.ID, e.Key, e.Fence = h.w.id(), k, h.lk.FenceOf(k)
			evs = append(evs, e)
		}
	}
	n.mu.Unlock()
	for _, e := range evs {
		n.Rec.Record(e)
	}
}

// worker is one logical client of a history: it takes locks through its
// node and writes to the protected resource, recording every step.
type worker struct {
	Proc   int
	Node   *node
	Res    redis.UniversalClient // the resource's server; nil: no resource
	Fenced bool                  // write with fenced.Set (else a plain SET)
	// BeforeWrite, if set, runs after the validity check and before write
	// i of a hold: where a pause or a delay hurts most.
	BeforeWrite func(lk *dlock.Lock, i int)
	// LockOpts are added to every acquire (e.g. dlock.WithProtocol).
	LockOpts []dlock.LockOption
	// Unique makes each grant's identity in the history unique (the token
	// and a sequence number), for protocols whose stored value is not
	// (legacy: a timestamp two clients can share).
	Unique bool

	seq atomic.Uint64
}

func (w *worker) id() uint64 { return uint64(w.Proc+1)<<40 | w.seq.Add(1) }

func (w *worker) rec(e event) {
	e.Proc = w.Proc
	w.Node.Rec.Record(e)
}

func (w *worker) now() int64 { return w.Node.Clock.Now() }

// Acquire takes key with Lock (wait) or TryLock, for ttl, and records it.
// On success it also records the lock's loss, if it is lost, when the
// library signals it. It returns nil if not acquired.
func (w *worker) Acquire(ctx context.Context, key string, ttl time.Duration, wait bool, opts ...dlock.LockOption) *dlock.Lock {
	return w.AcquireSpec(ctx, key, ttl, wait, grantSpec{}, opts...)
}

// AcquireSpec is Acquire of the kind of grant spec describes.
func (w *worker) AcquireSpec(ctx context.Context, key string, ttl time.Duration, wait bool, spec grantSpec, opts ...dlock.LockOption) *dlock.Lock {
	opts = append(append([]dlock.LockOption{dlock.WithTTL(ttl)}, w.LockOpts...), opts...)
	return w.acquire(ctx, []string{key}, ttl, wait, spec, func() (*dlock.Lock, error) {
		return spec.take(ctx, w.Node.Locks, key, wait, opts)
	})
}

// AcquireMulti takes every key of keys (LockMulti or TryLockMulti) and
// records one grant per key.
func (w *worker) AcquireMulti(ctx context.Context, keys []string, ttl time.Duration, wait bool, opts ...dlock.LockOption) *dlock.Lock {
	opts = append(append([]dlock.LockOption{dlock.WithTTL(ttl)}, w.LockOpts...), opts...)
	return w.acquire(ctx, keys, ttl, wait, grantSpec{}, func() (*dlock.Lock, error) {
		if wait {
			return w.Node.Locks.LockMulti(ctx, keys, opts...)
		}
		return w.Node.Locks.TryLockMulti(ctx, keys, opts...)
	})
}

func (w *worker) acquire(ctx context.Context, keys []string, ttl time.Duration, wait bool, spec grantSpec, do func() (*dlock.Lock, error)) *dlock.Lock {
	kind := kindTry
	if wait {
		kind = kindLock
	}
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	var ctxDeadline int64
	if d, ok := ctx.Deadline(); ok {
		ctxDeadline = w.Node.Clock.At(d)
	}
	ids := make(map[string]uint64, len(keys))
	t := w.now()
	for _, k := range keys {
		ids[k] = w.id()
		w.rec(spec.event(event{Type: evInvoke, ID: ids[k], T: t, Kind: kind, Key: k, Deadline: ctxDeadline, TTL: int64(ttl)}))
	}
	lk, err := do()
	now := w.now()
	if err != nil {
		typ := evFail
		if errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrContextDone) {
			// It may have been applied (a lost reply; the library then
			// deletes it in the background).
			typ = evInfo
		}
		for _, k := range keys {
			w.rec(event{Type: typ, ID: ids[k], T: now, Kind: kind, Key: k, Err: errText(err)})
		}
		return nil
	}
	owner := lk.Token()
	if w.Unique {
		owner = fmt.Sprintf("%s@%d.%d", owner, w.Proc, w.seq.Add(1))
	}
	h := &holding{w: w, lk: lk, ttl: ttl, owner: owner, keys: keys, spec: spec}
	if lks := lk.Keys(); len(lks) > 0 {
		h.keys = lks
	}
	drift := w.Node.drift(ttl)
	deadline := w.Node.Clock.At(lk.Deadline())
	h.last = deadline
	for _, k := range h.keys {
		id, ok := ids[k]
		if !ok { // a key the library names differently: record it anyway
			id = w.id()
			w.rec(spec.event(event{Type: evInvoke, ID: id, T: t, Kind: kind, Key: k, Deadline: ctxDeadline, TTL: int64(ttl)}))
		}
		w.rec(spec.event(event{Type: evOK, ID: id, T: now, Kind: kind, Key: k, Fence: lk.FenceOf(k), Owner: owner,
			Deadline: deadline, Sent: deadline - int64(ttl-drift), TTL: int64(ttl), Drift: int64(drift)}))
	}
	w.Node.add(h)
	go func() {
		<-lk.Done()
		if err := lk.Err(); errors.Is(err, dlock.ErrLost) {
			t, dl := w.now(), w.Node.Clock.At(lk.Deadline())
			for _, k := range h.keys {
				w.rec(event{Type: evOK, ID: w.id(), T: t, Kind: kindLost, Key: k, Fence: lk.FenceOf(k),
					Owner: owner, Deadline: dl, Err: errText(err)})
			}
		}
	}()
	return lk
}

// valid reports whether lk may still be acted on: not lost, and before its
// deadline. A careful holder checks it before every write.
func valid(lk *dlock.Lock) bool {
	return lk.Err() == nil && time.Now().Before(lk.Deadline())
}

// Work makes up to writes writes under lk, hold apart, each after
// checking the lock is still valid; it stops at the first invalid check.
// A reader reads the resource instead, a semaphore holder only holds; a
// multi-key holder writes every key's resource.
func (w *worker) Work(ctx context.Context, lk *dlock.Lock, writes int, hold time.Duration) {
	for i := range writes {
		if !valid(lk) || ctx.Err() != nil {
			return
		}
		if w.BeforeWrite != nil {
			w.BeforeWrite(lk, i)
		}
		w.Write(ctx, lk)
		if hold > 0 && i < writes-1 {
			select {
			case <-time.After(hold):
			case <-ctx.Done():
				return
			}
		}
	}
}

// resourceValue is what a write stores: its fence and owner.
func resourceValue(fence uint64, owner string) string {
	return strconv.FormatUint(fence, 10) + " " + owner
}

// parseResourceValue undoes resourceValue ("" gives 0, "").
func parseResourceValue(v string) (uint64, string) {
	f, o, _ := strings.Cut(v, " ")
	n, _ := strconv.ParseUint(f, 10, 64)
	return n, o
}

// Write writes lk's fence and identity to the resource of each of lk's
// keys: with fenced.Set if the worker is fenced, else with a plain
// SET (a resource that trusts the lock). A refused stale write is a Fail,
// an error an Info. A reader reads instead; a semaphore permit does
// nothing (its holders share no register).
func (w *worker) Write(ctx context.Context, lk *dlock.Lock) {
	if w.Res == nil {
		return
	}
	h := w.Node.holdingOf(lk)
	keys, owner, spec := []string{lk.Key()}, lk.Token(), grantSpec{}
	if h != nil {
		keys, owner, spec = h.keys, h.owner, h.spec
		if g := spec.group(); g != "" {
			owner = g // the handles of one hold write as one owner, with one fence
		}
	}
	for _, key := range keys {
		switch spec.Mode {
		case modeSemaphore:
			continue
		case modeShared:
			readResource(ctx, w.Res, key, w.Node.Clock, w.Node.Rec, w.Proc, uint64(1)<<61|w.id())
			continue
		}
		w.writeKey(ctx, key, lk.FenceOf(key), owner)
	}
}

func (w *worker) writeKey(ctx context.Context, key string, fence uint64, owner string) {
	id := w.id()
	w.rec(event{Type: evInvoke, ID: id, T: w.now(), Kind: kindWrite, Key: key, Fence: fence, Owner: owner})
	var err error
	if w.Fenced {
		err = fenced.Set(ctx, w.Res, resKey(key), fence, owner, resourceValue(fence, owner))
	} else {
		err = w.Res.Set(ctx, resKey(key), resourceValue(fence, owner), 0).Err()
	}
	e := event{Type: evOK, ID: id, T: w.now(), Kind: kindWrite, Key: key}
	switch {
	case errors.Is(err, fenced.ErrStale):
		e.Type, e.Err = evFail, "stale"
	case err != nil:
		e.Type, e.Err = evInfo, errText(err)
	}
	w.rec(e)
}

// Release unlocks lk and records it (once per key).
func (w *worker) Release(ctx context.Context, lk *dlock.Lock) error {
	h := w.Node.holdingOf(lk)
	keys, owner := []string{lk.Key()}, lk.Token()
	var drift int64 // the holder's: a loss it reports comes at its deadline, minExp less it
	if h != nil {
		keys, owner, drift = h.keys, h.owner, int64(w.Node.drift(h.ttl))
	}
	ids := make([]uint64, len(keys))
	t, dl := w.now(), w.Node.Clock.At(lk.Deadline())
	for i, k := range keys {
		ids[i] = w.id()
		w.rec(event{Type: evInvoke, ID: ids[i], T: t, Kind: kindUnlock, Key: k, Fence: lk.FenceOf(k), Owner: owner,
			Deadline: dl, Drift: drift})
	}
	err := lk.Unlock(ctx)
	// A careful caller retries an Unlock whose outcome is unknown (a lost
	// reply, a Redis blip): the retry must neither fail nor report a loss
	// for a release that went through.
	for i := 0; i < 2 && errors.Is(err, dlock.ErrUnavailable) && ctx.Err() == nil; i++ {
		err = lk.Unlock(ctx)
	}
	now := w.now()
	for i, k := range keys {
		e := event{Type: evOK, ID: ids[i], T: now, Kind: kindUnlock, Key: k}
		switch {
		case errors.Is(err, dlock.ErrNotHeld) && !w.Unique:
			e.Type, e.Err = evFail, errText(err)
		case err != nil:
			// (legacy: a loss reported at release may be the protocol's
			// documented false alarm, after a renewal whose reply was lost)
			e.Type, e.Err = evInfo, errText(err)
		}
		w.rec(e)
	}
	if h != nil {
		w.Node.remove(h)
	}
	return err
}

// Cycle is one round of a worker: acquire key (waiting at most wait; 0:
// TryLock), make writes under it, release it. It reports whether it held
// the lock.
func (w *worker) Cycle(ctx context.Context, key string, ttl, wait time.Duration, writes int, hold time.Duration) bool {
	return w.CycleSpec(ctx, key, grantSpec{}, ttl, wait, writes, hold)
}

// CycleSpec is Cycle for the kind of grant spec describes.
func (w *worker) CycleSpec(ctx context.Context, key string, spec grantSpec, ttl, wait time.Duration, writes int, hold time.Duration) bool {
	return w.cycle(ctx, wait, writes, hold, func(actx context.Context) *dlock.Lock {
		return w.AcquireSpec(actx, key, ttl, wait > 0, spec)
	})
}

// CycleMulti is Cycle of a multi-key lock on keys.
func (w *worker) CycleMulti(ctx context.Context, keys []string, ttl, wait time.Duration, writes int, hold time.Duration) bool {
	return w.cycle(ctx, wait, writes, hold, func(actx context.Context) *dlock.Lock {
		return w.AcquireMulti(actx, keys, ttl, wait > 0)
	})
}

func (w *worker) cycle(ctx context.Context, wait time.Duration, writes int, hold time.Duration, acquire func(context.Context) *dlock.Lock) bool {
	timeout := wait
	if wait <= 0 {
		timeout = 2 * time.Second
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	lk := acquire(actx)
	cancel()
	if lk == nil {
		return false
	}
	w.Work(ctx, lk, writes, hold)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = w.Release(rctx, lk)
	return true
}

// readResourceSeq reads the resource of key and records the read (proc is
// the reader's, ids come from seq).
func readResourceSeq(ctx context.Context, res redis.UniversalClient, key string, clock *timeBase, rec recorder, proc int, seq *atomic.Uint64) {
	readResource(ctx, res, key, clock, rec, proc, uint64(1)<<62|seq.Add(1))
}

func readResource(ctx context.Context, res redis.UniversalClient, key string, clock *timeBase, rec recorder, proc int, id uint64) {
	rec.Record(event{Type: evInvoke, ID: id, Proc: proc, T: clock.Now(), Kind: kindRead, Key: key})
	v, err := res.Get(ctx, resKey(key)).Result()
	e := event{Type: evOK, ID: id, Proc: proc, T: clock.Now(), Kind: kindRead, Key: key}
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		e.Type, e.Err = evInfo, errText(err)
	default:
		e.Fence, e.Owner = parseResourceValue(v)
	}
	rec.Record(e)
}

// nemesis records the faults it injects, as operations of process -1.
type nemesis struct {
	Clock *timeBase
	Rec   recorder
	seq   atomic.Uint64
}

// Span records a fault of kind (kindFault, kindPause) on proc from start to end.
func (n *nemesis) Span(kind opKind, proc int, note string, start, end int64) {
	n.Rec.Record(event{Type: evOK, ID: 1<<63 | n.seq.Add(1), Proc: proc, T: end, Call: start, Kind: kind, Note: note})
}

// KeySpan records a fault that concerns one key (a command on it, a pause
// of a step of its lock) from start to end.
func (n *nemesis) KeySpan(key, note string, start, end int64) {
	n.Rec.Record(event{Type: evOK, ID: 1<<63 | n.seq.Add(1), Proc: -1, T: end, Call: start, Kind: kindFault, Key: key, Note: note})
}

// Crash records that proc was killed at t.
func (n *nemesis) Crash(proc int, t int64, note string) {
	n.Rec.Record(event{Type: evOK, ID: 1<<63 | n.seq.Add(1), Proc: proc, T: t, Call: t, Kind: kindCrash, Note: note})
}

// Do runs fn as the fault note and records its span.
func (n *nemesis) Do(note string, fn func()) {
	start := n.Clock.Now()
	fn()
	n.Span(kindFault, -1, note, start, n.Clock.Now())
}

// errText is an error's text, cut to 200 bytes for the history.
func errText(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
