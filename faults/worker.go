package faults

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// ResKey returns the key of the protected resource written under lock key
// (on the resource's own Redis server).
func ResKey(key string) string { return "res:" + key }

// Node is one dlock Client as the suite drives it: its Renew hook records
// every watchdog renewal of the locks its workers hold.
type Node struct {
	Locks *dlock.Client
	Clock *Clock
	Rec   Recorder

	closers []io.Closer
	mu      sync.Mutex
	held    map[heldKey]*holding
}

type heldKey struct {
	key   string
	fence uint64
}

type holding struct {
	w   *Worker
	lk  *dlock.Lock
	ttl time.Duration
}

// NewNode makes a dlock Client over rdb whose renewals are recorded. The
// Node owns rdb: Close closes both.
func NewNode(rdb redis.UniversalClient, opts dlock.Options, clock *Clock, rec Recorder) (*Node, error) {
	return NewNodeWith(opts, clock, rec, func(o dlock.Options) (*dlock.Client, error) { return dlock.New(rdb, o) }, rdb)
}

// NewNodeWith makes a Node whose Client mk builds from opts (with the
// recording hook added), for Clients built another way (redlock.NewClient).
// Close closes the Client, then closers.
func NewNodeWith(opts dlock.Options, clock *Clock, rec Recorder, mk func(dlock.Options) (*dlock.Client, error), closers ...io.Closer) (*Node, error) {
	n := &Node{Clock: clock, Rec: rec, closers: closers, held: map[heldKey]*holding{}}
	opts.Hooks.Renew = n.onRenew
	c, err := mk(opts)
	if err != nil {
		return nil, err
	}
	n.Locks = c
	return n, nil
}

// Close closes the dlock Client (releasing what it holds) and what the
// Node owns.
func (n *Node) Close() error {
	errs := []error{n.Locks.Close()}
	for _, c := range n.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// drift is the Client's drift allowance for ttl (see dlock.Options).
func (n *Node) drift(ttl time.Duration) time.Duration {
	o := n.Locks.Options()
	return time.Duration(float64(ttl)*o.DriftFactor) + o.MinDrift
}

// onRenew records a watchdog renewal of a lock a worker holds. A renewal
// that succeeded moved the deadline to its send time + TTL - drift, which
// gives the send time. A renewal that found the lock gone is recorded as
// failed; one whose outcome is unknown (a Redis error, a reply too late)
// is not recorded.
func (n *Node) onRenew(info dlock.RenewInfo) {
	n.mu.Lock()
	h := n.held[heldKey{info.Key, info.Fence}]
	n.mu.Unlock()
	if h == nil {
		return
	}
	now := n.Clock.Now()
	e := Event{ID: h.w.id(), Proc: h.w.Proc, T: now, Kind: KRenew, Key: info.Key, Fence: info.Fence,
		Owner: h.lk.Token(), TTL: int64(h.ttl), Drift: int64(n.drift(h.ttl))}
	switch {
	case info.Err == nil:
		e.Type = OK
		e.Deadline = n.Clock.At(h.lk.Deadline())
		e.Sent = e.Deadline - int64(h.ttl-n.drift(h.ttl))
		e.Call = e.Sent
	case errors.Is(info.Err, dlock.ErrLost):
		e.Type, e.Call, e.Err = Fail, now, info.Err.Error()
	default:
		return
	}
	n.Rec.Record(e)
}

// Worker is one logical client of a history: it takes locks through its
// Node and writes to the protected resource, recording every step.
type Worker struct {
	Proc   int
	Node   *Node
	Res    redis.UniversalClient // the resource's server; nil: no resource
	Fenced bool                  // write with dlock.FencedSet (else a plain SET)
	// BeforeWrite, if set, runs after the validity check and before write
	// i of a hold: where a pause or a delay hurts most.
	BeforeWrite func(lk *dlock.Lock, i int)
	// LockOpts are added to every acquire (e.g. dlock.WithProtocol).
	LockOpts []dlock.LockOption

	seq atomic.Uint64
}

func (w *Worker) id() uint64 { return uint64(w.Proc+1)<<40 | w.seq.Add(1) }

func (w *Worker) rec(e Event) {
	e.Proc = w.Proc
	w.Node.Rec.Record(e)
}

func (w *Worker) now() int64 { return w.Node.Clock.Now() }

// Acquire takes key with Lock (wait) or TryLock, for ttl, and records it.
// On success it also records the lock's loss, if it is lost, when the
// library signals it. It returns nil if not acquired.
func (w *Worker) Acquire(ctx context.Context, key string, ttl time.Duration, wait bool, opts ...dlock.LockOption) *dlock.Lock {
	kind := KTry
	if wait {
		kind = KLock
	}
	id := w.id()
	var ctxDeadline int64
	if d, ok := ctx.Deadline(); ok {
		ctxDeadline = w.Node.Clock.At(d)
	}
	w.rec(Event{Type: Invoke, ID: id, T: w.now(), Kind: kind, Key: key, Deadline: ctxDeadline, TTL: int64(ttl)})
	opts = append(append([]dlock.LockOption{dlock.WithTTL(ttl)}, w.LockOpts...), opts...)
	var lk *dlock.Lock
	var err error
	if wait {
		lk, err = w.Node.Locks.Lock(ctx, key, opts...)
	} else {
		lk, err = w.Node.Locks.TryLock(ctx, key, opts...)
	}
	now := w.now()
	if err != nil {
		typ := Fail
		if errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrContextDone) {
			// It may have been applied (a lost reply; the library then
			// deletes it in the background).
			typ = Info
		}
		w.rec(Event{Type: typ, ID: id, T: now, Kind: kind, Key: key, Err: errText(err)})
		return nil
	}
	drift := w.Node.drift(ttl)
	deadline := w.Node.Clock.At(lk.Deadline())
	w.rec(Event{Type: OK, ID: id, T: now, Kind: kind, Key: key, Fence: lk.Fence(), Owner: lk.Token(),
		Deadline: deadline, Sent: deadline - int64(ttl-drift), TTL: int64(ttl), Drift: int64(drift)})
	w.Node.mu.Lock()
	w.Node.held[heldKey{key, lk.Fence()}] = &holding{w: w, lk: lk, ttl: ttl}
	w.Node.mu.Unlock()
	go func() {
		<-lk.Done()
		if err := lk.Err(); errors.Is(err, dlock.ErrLost) {
			w.rec(Event{Type: OK, ID: w.id(), T: w.now(), Kind: KLost, Key: key, Fence: lk.Fence(),
				Owner: lk.Token(), Deadline: w.Node.Clock.At(lk.Deadline()), Err: errText(err)})
		}
	}()
	return lk
}

// Valid reports whether lk may still be acted on: not lost, and before its
// deadline. A careful holder checks it before every write.
func Valid(lk *dlock.Lock) bool {
	return lk.Err() == nil && time.Now().Before(lk.Deadline())
}

// Work makes up to writes writes under lk, hold apart, each after
// checking the lock is still valid; it stops at the first invalid check.
func (w *Worker) Work(ctx context.Context, lk *dlock.Lock, writes int, hold time.Duration) {
	for i := range writes {
		if !Valid(lk) || ctx.Err() != nil {
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

// ResourceValue is what a write stores: its fence and owner.
func ResourceValue(fence uint64, owner string) string {
	return strconv.FormatUint(fence, 10) + " " + owner
}

// ParseResourceValue undoes ResourceValue ("" gives 0, "").
func ParseResourceValue(v string) (uint64, string) {
	f, o, _ := strings.Cut(v, " ")
	n, _ := strconv.ParseUint(f, 10, 64)
	return n, o
}

// Write writes lk's fence and token to the resource of lk's key: with
// dlock.FencedSet if the worker is fenced, else with a plain SET (a
// resource that trusts the lock). A refused stale write is a Fail, an
// error an Info.
func (w *Worker) Write(ctx context.Context, lk *dlock.Lock) {
	if w.Res == nil {
		return
	}
	key, fence, owner := lk.Key(), lk.Fence(), lk.Token()
	id := w.id()
	w.rec(Event{Type: Invoke, ID: id, T: w.now(), Kind: KWrite, Key: key, Fence: fence, Owner: owner})
	var err error
	if w.Fenced {
		err = dlock.FencedSet(ctx, w.Res, ResKey(key), fence, owner, ResourceValue(fence, owner))
	} else {
		err = w.Res.Set(ctx, ResKey(key), ResourceValue(fence, owner), 0).Err()
	}
	e := Event{Type: OK, ID: id, T: w.now(), Kind: KWrite, Key: key}
	switch {
	case errors.Is(err, dlock.ErrStaleFence):
		e.Type, e.Err = Fail, "stale"
	case err != nil:
		e.Type, e.Err = Info, errText(err)
	}
	w.rec(e)
}

// Release unlocks lk and records it.
func (w *Worker) Release(ctx context.Context, lk *dlock.Lock) error {
	key := lk.Key()
	id := w.id()
	w.rec(Event{Type: Invoke, ID: id, T: w.now(), Kind: KUnlock, Key: key, Fence: lk.Fence(), Owner: lk.Token(),
		Deadline: w.Node.Clock.At(lk.Deadline())})
	err := lk.Unlock(ctx)
	e := Event{Type: OK, ID: id, T: w.now(), Kind: KUnlock, Key: key}
	switch {
	case errors.Is(err, dlock.ErrNotHeld):
		e.Type, e.Err = Fail, errText(err)
	case err != nil:
		e.Type, e.Err = Info, errText(err)
	}
	w.rec(e)
	w.Node.mu.Lock()
	delete(w.Node.held, heldKey{key, lk.Fence()})
	w.Node.mu.Unlock()
	return err
}

// Cycle is one round of a worker: acquire key (waiting at most wait; 0:
// TryLock), make writes under it, release it. It reports whether it held
// the lock.
func (w *Worker) Cycle(ctx context.Context, key string, ttl, wait time.Duration, writes int, hold time.Duration) bool {
	timeout := wait
	if wait <= 0 {
		timeout = 2 * time.Second
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	lk := w.Acquire(actx, key, ttl, wait > 0)
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

// ReadResource reads the resource of key and records the read (proc is
// the reader's, ids come from seq).
func ReadResource(ctx context.Context, res redis.UniversalClient, key string, clock *Clock, rec Recorder, proc int, seq *atomic.Uint64) {
	id := uint64(1)<<62 | seq.Add(1)
	rec.Record(Event{Type: Invoke, ID: id, Proc: proc, T: clock.Now(), Kind: KRead, Key: key})
	v, err := res.Get(ctx, ResKey(key)).Result()
	e := Event{Type: OK, ID: id, Proc: proc, T: clock.Now(), Kind: KRead, Key: key}
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		e.Type, e.Err = Info, errText(err)
	default:
		e.Fence, e.Owner = ParseResourceValue(v)
	}
	rec.Record(e)
}

// Nemesis records the faults it injects, as operations of process -1.
type Nemesis struct {
	Clock *Clock
	Rec   Recorder
	seq   atomic.Uint64
}

// Span records a fault of kind (KFault, KPause) on proc from start to end.
func (n *Nemesis) Span(kind Kind, proc int, note string, start, end int64) {
	n.Rec.Record(Event{Type: OK, ID: 1<<63 | n.seq.Add(1), Proc: proc, T: end, Call: start, Kind: kind, Note: note})
}

// Crash records that proc was killed at t.
func (n *Nemesis) Crash(proc int, t int64, note string) {
	n.Rec.Record(Event{Type: OK, ID: 1<<63 | n.seq.Add(1), Proc: proc, T: t, Call: t, Kind: KCrash, Note: note})
}

// Do runs fn as the fault note and records its span.
func (n *Nemesis) Do(note string, fn func()) {
	start := n.Clock.Now()
	fn()
	n.Span(KFault, -1, note, start, n.Clock.Now())
}

// errText is an error's text, cut to 200 bytes for the history.
func errText(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
