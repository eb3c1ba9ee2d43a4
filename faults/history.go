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

// EventType is the type of a history event, after Jepsen: an operation is
// invoked, then completes ok, fails (it certainly did not take effect) or
// ends in info (unknown: it may or may not have taken effect).
type EventType string

const (
	Invoke EventType = "invoke"
	OK     EventType = "ok"
	Fail   EventType = "fail"
	Info   EventType = "info"
)

// Kind is what an event or operation is about.
type Kind string

const (
	KLock   Kind = "lock"    // Client.Lock (blocking, bounded by a context)
	KTry    Kind = "trylock" // Client.TryLock
	KExtend Kind = "extend"  // Lock.Extend
	KRenew  Kind = "renew"   // a watchdog renewal (from the Renew hook)
	KUnlock Kind = "unlock"  // Lock.Unlock
	KLost   Kind = "lost"    // the lost-lock signal: Done closed with ErrLost
	KWrite  Kind = "write"   // a write to the protected resource
	KRead   Kind = "read"    // a read of the protected resource
	KCrash  Kind = "crash"   // the nemesis killed a process (Proc) at T
	KPause  Kind = "pause"   // the nemesis stopped a process (Proc) from Call to T
	KFault  Kind = "fault"   // the nemesis injected a fault (Note) from Call to T
	KMark   Kind = "mark"    // a progress marker of a worker (Note), for the harness
	// KSetLimit: Client.SetLimit of a semaphore key (Limit; 0 removes it).
	KSetLimit Kind = "setlimit"
)

// Modes of a grant (Event.Mode): how it shares its key with other grants.
const (
	ModeExclusive = ""       // a plain, multi-key, legacy, redlock or reentrant lock
	ModeShared    = "shared" // a reader: overlaps other readers, never a writer
	ModeSemaphore = "sem"    // Permits of a semaphore with Limit permits in all
)

// Never is the return time of an operation that never returned.
const Never = math.MaxInt64

// Event is one entry of a history. Times are on the suite's Clock.
type Event struct {
	Type EventType `json:"type"`
	ID   uint64    `json:"id"`   // pairs an invoke with its completion
	Proc int       `json:"proc"` // the worker (or the nemesis, -1)
	T    int64     `json:"t"`
	Kind Kind      `json:"kind"`
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

// Recorder receives events. History implements it; a child process's
// recorder writes them to its parent.
type Recorder interface {
	Record(Event)
}

// History is a thread-safe, append-only list of events.
type History struct {
	mu     sync.Mutex
	events []Event
}

// Record appends e.
func (h *History) Record(e Event) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

// Events returns a copy of the events, in time order.
func (h *History) Events() []Event {
	h.mu.Lock()
	out := append([]Event(nil), h.events...)
	h.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].T < out[j].T })
	return out
}

// Op is an operation: an invoke paired with its completion.
type Op struct {
	ID           uint64
	Proc         int
	Kind         Kind
	Key          string
	Call, Return int64     // Return is Never if the outcome is unknown (Info)
	End          int64     // when the call returned to its caller (0: never)
	Status       EventType // OK, Fail or Info
	Fence        uint64
	Owner        string
	CtxDeadline  int64 // lock/trylock: the context deadline (0: none)
	Deadline     int64 // see Event.Deadline (the completion's, else the invoke's)
	Sent, TTL    int64
	Drift        int64
	Err, Note    string
	Mode, Group  string
	Limit        int
	Permits      int
}

// Ops pairs the events into operations, ordered by call time. An invoke
// without a completion (its process was killed, or the history ended)
// becomes an Info operation that never returned.
func Ops(events []Event) []Op {
	byID := map[uint64]*Op{}
	var order []uint64
	for _, e := range events {
		op := byID[e.ID]
		if op == nil {
			op = &Op{ID: e.ID, Proc: e.Proc, Kind: e.Kind, Key: e.Key, Call: e.T, Return: Never, Status: Info}
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
		if e.Type == Invoke {
			op.Call = e.T
			if e.Kind == KLock || e.Kind == KTry {
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
		if e.Type == Info {
			// Unknown outcome: it may take effect at any later time.
			op.Return = Never
		}
	}
	ops := make([]Op, 0, len(order))
	for _, id := range order {
		ops = append(ops, *byID[id])
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops
}

// EventPrefix starts every line a child process writes for its parent's
// history; other lines are diagnostics.
const EventPrefix = "ev "

// StreamRecorder writes events as JSON lines (after EventPrefix) to w: the
// recorder of a child process, whose parent reads them with ReadEvents.
type StreamRecorder struct {
	mu sync.Mutex
	w  io.Writer
}

// NewStreamRecorder returns a recorder writing to w (os.Stdout in a child).
func NewStreamRecorder(w io.Writer) *StreamRecorder { return &StreamRecorder{w: w} }

func (s *StreamRecorder) Record(e Event) {
	b, _ := json.Marshal(e)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = fmt.Fprintf(s.w, "%s%s\n", EventPrefix, b)
}

// ReadEvents reads a child's output: every event line goes to rec and to
// each (if not nil); any other line to other (if not nil). It returns at
// the end of r.
func ReadEvents(r io.Reader, rec Recorder, each func(Event), other func(string)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		js, ok := strings.CutPrefix(line, EventPrefix)
		if !ok {
			if other != nil {
				other(line)
			}
			continue
		}
		var e Event
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

// SaveJSON writes the events to path as a JSON array, for post-mortems.
func SaveJSON(path string, events []Event) error {
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
