package faults

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
)

// eventType is the type of a history event, after Jepsen: an operation is
// invoked, then completes ok, fails (it certainly did not take effect) or
// ends in info (unknown: it may or may not have taken effect).
type eventType string

const (
	evInvoke eventType = "invoke"
	evOK     eventType = "ok"
	evFail   eventType = "fail"
	evInfo   eventType = "info"
)

// opKind is what an event or operation is about.
type opKind string

const (
	kindLock   opKind = "lock"    // Client.Lock (blocking, bounded by a context)
	kindTry    opKind = "trylock" // Client.TryLock
	kindExtend opKind = "extend"  // Lock.Extend
	kindRenew  opKind = "renew"   // a watchdog renewal (from the Renew hook)
	kindUnlock opKind = "unlock"  // Lock.Unlock
	kindLost   opKind = "lost"    // the lost-lock signal: Done closed with ErrLost
	kindWrite  opKind = "write"   // a write to the protected resource
	kindRead   opKind = "read"    // a read of the protected resource
	kindCrash  opKind = "crash"   // the nemesis killed a process (Proc) at T
	kindPause  opKind = "pause"   // the nemesis stopped a process (Proc) from Call to T
	kindFault  opKind = "fault"   // the nemesis injected a fault (Note) from Call to T
	kindMark   opKind = "mark"    // a progress marker of a worker (Note), for the harness
	// kindSetLimit: dlock.Semaphore.SetLimit of a semaphore key (Limit; 0 removes it).
	kindSetLimit opKind = "setlimit"
	// kindReleaseToken: Client.ReleaseToken of Key for the holder Owner
	// (an operator's release with the holder's token).
	kindReleaseToken opKind = "releasetoken"
	// kindForceRelease: Client.ForceRelease of Key (every holder).
	kindForceRelease opKind = "forcerelease"
)

// Modes of a grant (event.Mode): how it shares its key with other grants.
const (
	modeExclusive = ""       // a plain, multi-key, legacy, redlock or reentrant lock
	modeShared    = "shared" // a reader: overlaps other readers, never a writer
	modeSemaphore = "sem"    // Permits of a semaphore with Limit permits in all
)

// never is the return time of an operation that never returned.
const never = math.MaxInt64

// event is one entry of a history. Times are on the suite's timeBase.
type event struct {
	Type eventType `json:"type"`
	ID   uint64    `json:"id"`   // pairs an invoke with its completion
	Proc int       `json:"proc"` // the worker (or the nemesis, -1)
	T    int64     `json:"t"`
	Kind opKind    `json:"kind"`
	Key  string    `json:"key,omitempty"`

	Fence uint64 `json:"fence,omitempty"`
	Owner string `json:"owner,omitempty"` // the lock token (a grant's identity)
	// Deadline: on a lock/trylock invoke, the context's deadline; on a
	// grant or a renewal, the validity deadline it gave; on an unlock
	// invoke or a loss, the lock's deadline at that moment.
	Deadline int64 `json:"deadline,omitempty"`
	Sent     int64 `json:"sent,omitempty"` // grant, renewal: when its request was sent
	TTL      int64 `json:"ttl,omitempty"`
	Drift    int64 `json:"drift,omitempty"` // the drift allowance of TTL
	// Call, on a completion recorded after the fact (renewals, faults),
	// is the operation's start; otherwise the invoke event gives it.
	Call int64  `json:"call,omitempty"`
	Err  string `json:"err,omitempty"`
	Note string `json:"note,omitempty"`

	// Mode, Group, Limit, Permits describe a grant (on its invoke or
	// completion): Mode is one of the Mode constants; Group names a
	// reentrant hold (its handles may overlap each other, never another
	// group); Limit (also of a setlimit) and Permits are a semaphore's.
	Mode    string `json:"mode,omitempty"`
	Group   string `json:"group,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	Permits int    `json:"permits,omitempty"`
}

// recorder receives events. history implements it; a child process's
// recorder writes them to its parent.
type recorder interface {
	Record(event)
}

// history is a thread-safe, append-only list of events.
type history struct {
	mu     sync.Mutex
	events []event
}

// Record appends e.
func (h *history) Record(e event) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

// Events returns a copy of the events, in time order.
func (h *history) Events() []event {
	h.mu.Lock()
	out := append([]event(nil), h.events...)
	h.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].T < out[j].T })
	return out
}

// operation is an invoke paired with its completion.
type operation struct {
	ID           uint64
	Proc         int
	Kind         opKind
	Key          string
	Call, Return int64     // Return is never if the outcome is unknown (evInfo)
	End          int64     // when the call returned to its caller (0: never)
	Status       eventType // evOK, evFail or evInfo
	Fence        uint64
	Owner        string
	CtxDeadline  int64 // lock/trylock: the context deadline (0: none)
	Deadline     int64 // see event.Deadline (the completion's, else the invoke's)
	Sent, TTL    int64
	Drift        int64
	Err, Note    string
	Mode, Group  string
	Limit        int
	Permits      int
}

// pairOps pairs the events into operations, ordered by call time. An invoke
// without a completion (its process was killed, or the history ended)
// becomes an evInfo operation that never returned.
func pairOps(events []event) []operation {
	byID := map[uint64]*operation{}
	var order []uint64
	for _, e := range events {
		op := byID[e.ID]
		if op == nil {
			op = &operation{ID: e.ID, Proc: e.Proc, Kind: e.Kind, Key: e.Key, Call: e.T, Return: never, Status: evInfo}
			byID[e.ID] = op
			order = append(order, e.ID)
		}
		if e.Fence != 0 {
			op.Fence = e.Fence
		}
		if e.Owner != "" {
			op.Owner = e.Owner
		}
		if e.Sent != 0 {
			op.Sent = e.Sent
		}
		if e.TTL != 0 {
			op.TTL = e.TTL
		}
		if e.Drift != 0 {
			op.Drift = e.Drift
		}
		if e.Note != "" {
			op.Note = e.Note
		}
		if e.Mode != "" {
			op.Mode = e.Mode
		}
		if e.Group != "" {
			op.Group = e.Group
		}
		if e.Limit != 0 {
			op.Limit = e.Limit
		}
		if e.Permits != 0 {
			op.Permits = e.Permits
		}
		if e.Type == evInvoke {
			op.Call = e.T
			if e.Kind == kindLock || e.Kind == kindTry {
				op.CtxDeadline = e.Deadline
			} else if e.Deadline != 0 {
				op.Deadline = e.Deadline
			}
			continue
		}
		if e.Call != 0 {
			op.Call = e.Call
		}
		op.Return, op.End, op.Status, op.Err = e.T, e.T, e.Type, e.Err
		if e.Deadline != 0 {
			op.Deadline = e.Deadline
		}
		if e.Type == evInfo {
			// Unknown outcome: it may take effect at any later time.
			op.Return = never
		}
	}
	ops := make([]operation, 0, len(order))
	for _, id := range order {
		ops = append(ops, *byID[id])
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops
}

// eventPrefix starts every line a child process writes for its parent's
// history; other lines are diagnostics.
const eventPrefix = "ev "

// streamRecorder writes events as JSON lines (after eventPrefix) to w: the
// recorder of a child process, whose parent reads them with readEvents.
type streamRecorder struct {
	mu sync.Mutex
	w  io.Writer
}

// newStreamRecorder returns a recorder writing to w (os.Stdout in a child).
func newStreamRecorder(w io.Writer) *streamRecorder { return &streamRecorder{w: w} }

func (s *streamRecorder) Record(e event) {
	b, _ := json.Marshal(e)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = fmt.Fprintf(s.w, "%s%s\n", eventPrefix, b)
}

// readEvents reads a child's output: every event line goes to rec and to
// each (if not nil); any other line to other (if not nil). It returns at
// the end of r.
func readEvents(r io.Reader, rec recorder, each func(event), other func(string)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		js, ok := strings.CutPrefix(line, eventPrefix)
		if !ok {
			if other != nil {
				other(line)
			}
			continue
		}
		var e event
		if err := json.Unmarshal([]byte(js), &e); err != nil {
			return fmt.Errorf("faults: bad event line %q: %w", line, err)
		}
		rec.Record(e)
		if each != nil {
			each(e)
		}
	}
	return sc.Err()
}

// saveJSON writes the events to path as a JSON array, for post-mortems.
func saveJSON(path string, events []event) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	enc.SetIndent("", " ")
	if err := enc.Encode(events); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
