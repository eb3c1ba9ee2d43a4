package dlockotel

import (
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/dlock-go/dlock"
	"go.opentelemetry.io/otel/trace"
)

// correlator matches the hooks' events, which carry no context, to the
// wrapper calls that made them, so the wrappers' spans can show what only
// the core knows.
//
// A wrapper registers its call under the key before calling the Client and
// claims its event after: the core calls the hook synchronously, before the
// call returns, so the event is there by then. While any call is pending
// for a key, the hooks keep that key's events; otherwise they drop them
// after one atomic load. An acquire event is the call's own if its fence
// equals the lock's (acquired) or its Err is the very error value the call
// returned (not acquired); a release event if its Err is the returned error
// (for a nil error: the last successful release of the key, which, while
// the call holds the key, only the call itself can have made).
//
// It also remembers, for each key locked through a wrapper and still held,
// the spans a dlock.lost span should hang from.
type correlator struct {
	pending atomic.Int64 // wrapper calls between begin and end
	nHeld   atomic.Int64 // len(held)

	mu   sync.Mutex
	acq  map[string]*slot[dlock.AcquireInfo]
	rel  map[string]*slot[dlock.ReleaseInfo]
	held map[string]*heldLock
}

// slot keeps a key's events while calls on it are pending.
type slot[T any] struct {
	calls  int
	events []T
}

// maxEvents bounds a slot: events of calls made without the wrappers pile
// up while wrapper calls on the same key keep overlapping.
const maxEvents = 64

// heldLock is a lock taken through a wrapper and not yet released or lost.
type heldLock struct {
	fence   uint64
	caller  trace.Span        // current in the ctx given to the wrapper; may not be recording
	acquire trace.SpanContext // the dlock.acquire span
}

func (c *correlator) init() {
	c.acq = make(map[string]*slot[dlock.AcquireInfo])
	c.rel = make(map[string]*slot[dlock.ReleaseInfo])
	c.held = make(map[string]*heldLock)
}

func begin[T any](c *correlator, m map[string]*slot[T], key string) {
	c.pending.Add(1)
	c.mu.Lock()
	s := m[key]
	if s == nil {
		s = &slot[T]{}
		m[key] = s
	}
	s.calls++
	c.mu.Unlock()
}

// end unregisters a call on key and returns the last of its key's events
// for which match is true, removing it.
func end[T any](c *correlator, m map[string]*slot[T], key string, match func(T) bool) (ev T, ok bool) {
	c.mu.Lock()
	if s := m[key]; s != nil {
		for i := len(s.events) - 1; i >= 0; i-- {
			if match(s.events[i]) {
				ev, ok = s.events[i], true
				s.events = append(s.events[:i], s.events[i+1:]...)
				break
			}
		}
		if s.calls--; s.calls == 0 {
			delete(m, key)
		}
	}
	c.mu.Unlock()
	c.pending.Add(-1)
	return ev, ok
}

func record[T any](c *correlator, m map[string]*slot[T], key string, ev T) {
	if c.pending.Load() == 0 {
		return
	}
	c.mu.Lock()
	if s := m[key]; s != nil {
		if len(s.events) == maxEvents {
			s.events = append(s.events[:0], s.events[1:]...)
		}
		s.events = append(s.events, ev)
	}
	c.mu.Unlock()
}

func (c *correlator) beginAcquire(key string) { begin(c, c.acq, key) }

func (c *correlator) endAcquire(key string, fence uint64, err error) (dlock.AcquireInfo, bool) {
	return end(c, c.acq, key, func(i dlock.AcquireInfo) bool {
		if err == nil {
			return i.Err == nil && i.Fence == fence
		}
		return sameError(i.Err, err)
	})
}

func (c *correlator) beginRelease(key string) { begin(c, c.rel, key) }

func (c *correlator) endRelease(key string, err error) (dlock.ReleaseInfo, bool) {
	return end(c, c.rel, key, func(i dlock.ReleaseInfo) bool { return sameError(i.Err, err) })
}

// acquired is the Acquire hook's part.
func (c *correlator) acquired(i dlock.AcquireInfo) { record(c, c.acq, i.Key, i) }

// released is the Release hook's part: it keeps the event for a pending
// Unlock, and forgets a released lock.
func (c *correlator) released(i dlock.ReleaseInfo) {
	record(c, c.rel, i.Key, i)
	if i.Err == nil && c.nHeld.Load() > 0 {
		c.mu.Lock()
		if _, ok := c.held[i.Key]; ok {
			delete(c.held, i.Key)
			c.nHeld.Add(-1)
		}
		c.mu.Unlock()
	}
}

// lost is the Lost hook's part: it returns (and forgets) what the wrappers
// recorded for the lost lock, nil if it was not taken through them.
func (c *correlator) lost(i dlock.LostInfo) *heldLock {
	if c.nHeld.Load() == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.held[i.Key]
	if h == nil || h.fence != i.Fence {
		return nil
	}
	delete(c.held, i.Key)
	c.nHeld.Add(-1)
	return h
}

// hold records a lock acquired through a wrapper. A key is held by one lock
// at a time, so a record left behind for the key (its release or loss went
// unseen) is replaced.
func (c *correlator) hold(key string, h *heldLock) {
	c.mu.Lock()
	if _, ok := c.held[key]; !ok {
		c.nHeld.Add(1)
	}
	c.held[key] = h
	c.mu.Unlock()
}

// forget removes the record of the lock with this fence on key, if any.
func (c *correlator) forget(key string, fence uint64) {
	c.mu.Lock()
	if h := c.held[key]; h != nil && h.fence == fence {
		delete(c.held, key)
		c.nHeld.Add(-1)
	}
	c.mu.Unlock()
}

// sameError reports whether a and b are the same error value. Errors of
// types that cannot be compared are never the same.
func sameError(a, b error) (same bool) {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ta := reflect.TypeOf(a)
	if ta != reflect.TypeOf(b) || !ta.Comparable() {
		return false
	}
	defer func() {
		if recover() != nil { // a comparable struct holding an incomparable interface value
			same = false
		}
	}()
	return a == b
}
