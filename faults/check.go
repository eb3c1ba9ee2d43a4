package faults

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// stallProc is the process of the kindPause spans in which the test process
// itself was measurably not scheduled (a ticker's ticks came late): the
// machine's load stopped every worker in it then. R2 and L1 do not count
// that time against the library (S1-S3 do not care).
const stallProc = -3

// invariant names an invariant (S1–S3 safety, R1–R2 loss reporting, L1–L4 liveness).
type invariant string

const (
	invS1 invariant = "S1" // no two believed-held intervals of one key overlap
	invS2 invariant = "S2" // the resource never accepts a stale fence; fences unique and increasing
	invS3 invariant = "S3" // the history is linearizable (lease-aware fenced mutex + fenced register)
	invR1 invariant = "R1" // release and renewal never touch another owner's lock
	invR2 invariant = "R2" // the holder is told of a loss by its deadline
	invL1 invariant = "L1" // Lock returns by its context's deadline
	invL2 invariant = "L2" // after a holder crash, a waiter gets the lock within TTL + ε
	invL3 invariant = "L3" // O(1) server commands per hand-off
	invL4 invariant = "L4" // no orphaned lock after an ambiguous acquire
)

// invariants lists them in report order.
var invariants = []invariant{invS1, invS2, invS3, invR1, invR2, invL1, invL2, invL3, invL4}

// params are the bounds a history is checked against.
type params struct {
	FencedResource bool          // the resource is written with fenced.Set
	L1Slack        time.Duration // how far past its context deadline a Lock may return
	R2Slack        time.Duration // how far past the deadline the loss signal may come
	L2Bound        time.Duration // crash → next grant (TTL + retry + ε)
	L3Bound        float64       // server commands per hand-off (0: not checked)
	L4Bound        time.Duration // how long a lock key may hold a token nobody received
	S3Timeout      time.Duration // porcupine's budget per history
	// CommandsFrom, CommandsTo: the window in which server commands are
	// counted for L3 (0, 0: the whole history).
	CommandsFrom, CommandsTo int64
}

// defaultParams are the bounds used unless a scenario sets its own.
func defaultParams() params {
	return params{
		FencedResource: true,
		L1Slack:        250 * time.Millisecond,
		R2Slack:        100 * time.Millisecond,
		L4Bound:        1500 * time.Millisecond,
		S3Timeout:      20 * time.Second,
	}
}

// result is the verdict on one or more histories.
type result struct {
	Histories          int
	OK, Fail, Unknown  int // operations (grants, renewals, releases, writes, reads) by outcome
	Violations         map[invariant]int
	S1MaxOverlap       int64
	StaleAccepted      int // S2
	StaleRefused       int // writes the fenced resource refused
	StaleAttempted     int // writes made after the writer's validity had ended
	DupFences          int // S2: one fence, two grants
	Regressions        int // S2: a later grant with a smaller fence
	S3Illegal, S3Unk   int
	R2MaxLag           int64
	R2Exempt           int // losses signalled late because the holder itself was stopped
	R2Stalled          int // ... or because the test process was not scheduled (stallProc)
	L1Stalled          int // Lock calls late because the test process was not scheduled
	L1MaxOver          int64
	R2Worst, L1Worst   worstCase // the latest loss signal, the Lock furthest past its deadline
	Handovers          []int64   // unlock (or crash) → next grant, ns
	CrashHandovers     []int64
	Commands, Handoffs int // L3
	Monitored          int // histories with a server-side view (R1, L3, L4 checked)
	Unparsed           int // MONITOR lines that could not be parsed (the view missed a command)
	Orphans            []int64
	Counter            []counterRun   // Counter stock checks
	Reshard            []reshardRun   // live-reshard figures
	Refused            int            // acquires (or Clients) refused as invalid arguments
	CmdFaults          map[string]int // command-level faults injected, by action
	Pauses             int            // scheduler pauses injected at the engine's pause points
	Details            []string
	stalled            func(from, to int64) int64
	spans              []operation // the history's faults and pauses (for worstCase)
	// Illegal is porcupine's account of the first history S3 rejected,
	// for porcupine.Visualize with model().
	Illegal *porcupine.LinearizationInfo
}

func (r *result) add(inv invariant, n int, f string, a ...any) {
	if n == 0 {
		return
	}
	if r.Violations == nil {
		r.Violations = map[invariant]int{}
	}
	r.Violations[inv] += n
	if len(r.Details) < 20 {
		r.Details = append(r.Details, fmt.Sprintf(string(inv)+": "+f, a...))
	}
}

// Merge adds o to r.
func (r *result) Merge(o result) {
	r.Histories += o.Histories
	r.OK += o.OK
	r.Fail += o.Fail
	r.Unknown += o.Unknown
	for k, v := range o.Violations {
		if r.Violations == nil {
			r.Violations = map[invariant]int{}
		}
		r.Violations[k] += v
	}
	r.S1MaxOverlap = max(r.S1MaxOverlap, o.S1MaxOverlap)
	r.StaleAccepted += o.StaleAccepted
	r.StaleRefused += o.StaleRefused
	r.StaleAttempted += o.StaleAttempted
	r.DupFences += o.DupFences
	r.Regressions += o.Regressions
	r.S3Illegal += o.S3Illegal
	r.S3Unk += o.S3Unk
	r.R2MaxLag = max(r.R2MaxLag, o.R2MaxLag)
	r.R2Exempt += o.R2Exempt
	r.R2Stalled += o.R2Stalled
	r.L1Stalled += o.L1Stalled
	r.L1MaxOver = max(r.L1MaxOver, o.L1MaxOver)
	r.R2Worst.keep(o.R2Worst)
	r.L1Worst.keep(o.L1Worst)
	r.Handovers = append(r.Handovers, o.Handovers...)
	r.CrashHandovers = append(r.CrashHandovers, o.CrashHandovers...)
	r.Commands += o.Commands
	r.Monitored += o.Monitored
	r.Unparsed += o.Unparsed
	r.Handoffs += o.Handoffs
	r.Orphans = append(r.Orphans, o.Orphans...)
	r.Counter = append(r.Counter, o.Counter...)
	r.Reshard = append(r.Reshard, o.Reshard...)
	r.Refused += o.Refused
	r.Pauses += o.Pauses
	for k, v := range o.CmdFaults {
		if r.CmdFaults == nil {
			r.CmdFaults = map[string]int{}
		}
		r.CmdFaults[k] += v
	}
	if r.Illegal == nil {
		r.Illegal = o.Illegal
	}
	for _, d := range o.Details {
		if len(r.Details) < 20 {
			r.Details = append(r.Details, d)
		}
	}
}

// counterRun is one history's Counter: its stock, the units sold (orders
// committed), what was left, and the Take calls that failed.
type counterRun struct {
	Stock, Sold, Left, Errors int64
}

// reshardRun is what one live-reshard history measured (see
// reshard_test.go): the moves, and what they cost the locks' users.
type reshardRun struct {
	Slots, Keys int // slot moves, keys they migrated
	// Increments made under a lock, and the count the resource holds:
	// fewer is a lost update.
	Increments, Count int64
	// Errors that reached a caller (Lock, TryLock, Unlock) whose ctx had
	// time left, those among them other than a script failing mid-way,
	// and the scripts that failed mid-way (in calls and renewals) on a
	// key of a migrating slot they did not declare.
	CallerErrors, CallerOther, MidScript int
	Lost                                 int    // held locks lost
	LongestGap                           int64  // longest span a lock key had no holder, ns
	GapKey                               string // ... on which key
	Blocked                              int64  // longest span a lock key had no holder while a caller waited for it, ns
	BlockedKey                           string // ... on which key
	Samples                              []string
}

// grant is one successful acquire and what followed it.
type grant struct {
	lock     operation
	key      string
	owner    string
	mode     string
	group    string
	permits  int
	limit    int
	proc     int
	start    int64 // the acquire returned: the holder believes it holds from here
	end      int64 // min(unlock called, loss signalled, crash, last deadline)
	deadline int64 // the last validity deadline the holder learnt
	unlock   *operation
	crashed  bool
	crashAt  int64
}

// check checks one history: its events and, if not nil, the server-side
// view of the lock server (MONITOR lines).
func check(events []event, lines []monLine, p params) result {
	r := result{Histories: 1}
	ops := pairOps(events)
	for _, op := range ops {
		switch op.Kind {
		case kindLock, kindTry, kindRenew, kindExtend, kindUnlock, kindWrite, kindRead:
			switch op.Status {
			case evOK:
				r.OK++
			case evFail:
				r.Fail++
				if (op.Kind == kindLock || op.Kind == kindTry) && strings.Contains(op.Err, "invalid argument") {
					r.Refused++
				}
			default:
				r.Unknown++
			}
		}
	}
	pauses := map[int][][2]int64{}
	var stalls [][2]int64
	crashes := map[int]int64{}
	for _, op := range ops {
		switch op.Kind {
		case kindPause:
			if op.Proc == stallProc {
				stalls = append(stalls, [2]int64{op.Call, op.End})
				continue
			}
			pauses[op.Proc] = append(pauses[op.Proc], [2]int64{op.Call, op.End})
		case kindCrash:
			if _, ok := crashes[op.Proc]; !ok {
				crashes[op.Proc] = op.Call
			}
		}
	}
	paused := func(proc int, from, to int64) bool {
		for _, s := range pauses[proc] {
			if s[0] <= to && s[1] >= from {
				return true
			}
		}
		return false
	}
	// stalled is how long, between from and to, the test process itself
	// was measurably not scheduled (see stallProc): time the checked
	// process could not act in, as if stopped.
	stalled := func(from, to int64) int64 {
		var d int64
		for _, s := range stalls {
			d += max(0, min(s[1], to)-max(s[0], from))
		}
		return d
	}
	r.stalled = stalled
	for _, op := range ops {
		if op.Kind == kindFault || op.Kind == kindPause {
			r.spans = append(r.spans, op)
		}
	}

	grants := buildGrants(ops, crashes)
	endByAdmin(grants, adminReleases(ops))
	limits := map[string][]operation{}
	for _, op := range ops {
		if op.Kind == kindSetLimit {
			limits[op.Key] = append(limits[op.Key], op)
		}
	}
	checkS1(&r, grants, limits)
	checkS2(&r, ops, grants)
	checkS3(&r, ops, p)
	checkR2(&r, ops, grants, p, paused)
	checkL1(&r, ops, p, paused)
	checkHandovers(&r, grants, ops, p, crashes)

	if lines != nil {
		r.Monitored = 1
		// The server-side replay knows plain string locks: a key held as
		// a shared hold (readers, a reentrant owner) or a semaphore's
		// sorted set is left to S1 and S3.
		// Only keys somebody was granted are replayed: a name that was
		// refused (a reserved auxiliary name) is dlock's own state.
		keys, owned, holds := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, op := range ops {
			if op.Kind == kindLock || op.Kind == kindTry {
				if op.Status == evOK {
					keys[op.Key] = true
				}
				if op.Mode != modeExclusive || op.Group != "" {
					holds[op.Key] = true
				}
			}
		}
		for k := range holds {
			delete(keys, k)
		}
		for _, g := range grants {
			owned[g.owner] = true
		}
		from, to := p.CommandsFrom, p.CommandsTo
		if from == 0 && to == 0 {
			to = never
		}
		ms := analyzeMonitor(lines, keys, owned, from, to)
		r.add(invR1, ms.Foreign, "%d foreign writes", ms.Foreign)
		r.Unparsed = ms.Unparsed
		for _, d := range ms.Details {
			if len(r.Details) < 20 {
				r.Details = append(r.Details, d)
			}
		}
		for _, o := range ms.Orphans {
			r.Orphans = append(r.Orphans, o.Dur)
			if o.Dur > int64(p.L4Bound) {
				r.add(invL4, 1, "key %s held token %s nobody received for %s (bound %v)", o.Key, o.Token, dur(o.Dur), p.L4Bound)
			}
		}
		if p.L3Bound > 0 {
			r.Commands = ms.Commands
			if r.Handoffs > 0 {
				if per := float64(ms.Commands) / float64(r.Handoffs); per > p.L3Bound {
					r.add(invL3, 1, "%.1f commands per hand-off (bound %.1f)", per, p.L3Bound)
				}
			}
		}
	}
	return r
}

func buildGrants(ops []operation, crashes map[int]int64) []*grant {
	// A multi-key grant has one token on several keys: a grant is one
	// (owner, key).
	id := func(owner, key string) string { return owner + "\x00" + key }
	byOwner := map[string]*grant{}
	var grants []*grant
	for _, op := range ops {
		if (op.Kind == kindLock || op.Kind == kindTry) && op.Status == evOK {
			g := &grant{lock: op, key: op.Key, owner: op.Owner, mode: op.Mode, group: op.Group,
				permits: max(op.Permits, 1), limit: op.Limit, proc: op.Proc, start: op.End, deadline: op.Deadline}
			byOwner[id(op.Owner, op.Key)] = g
			grants = append(grants, g)
		}
	}
	for i := range ops {
		op := &ops[i]
		g := byOwner[id(op.Owner, op.Key)]
		if g == nil || op.Kind == kindLock || op.Kind == kindTry {
			continue
		}
		switch op.Kind {
		case kindRenew, kindExtend:
			if op.Status == evOK {
				g.deadline = max(g.deadline, op.Deadline)
			}
		case kindUnlock:
			if g.unlock == nil {
				g.unlock = op
			}
		}
	}
	for _, g := range grants {
		g.end = g.deadline
		if g.unlock != nil {
			g.end = min(g.end, g.unlock.Call)
		}
		for _, op := range ops {
			if op.Kind == kindLost && op.Owner == g.owner && op.Key == g.key {
				g.end = min(g.end, op.Call)
			}
		}
		if t, ok := crashes[g.proc]; ok && t >= g.start {
			g.crashed, g.crashAt = true, t
			g.end = min(g.end, t)
		}
		g.end = max(g.end, g.start) // an empty interval: the grant was already over when it arrived
	}
	return grants
}

// compatible reports whether grants a and b of one key may be held at the
// same time: one grant (a multi-key token on its key), handles of one
// reentrant hold, or two readers. Semaphore permits are counted instead
// (checkSemaphore).
func compatible(a, b *grant) bool {
	switch {
	case a.owner == b.owner:
		return true
	case a.group != "" && a.group == b.group:
		return true
	case a.mode == modeShared && b.mode == modeShared:
		return true
	case a.mode == modeSemaphore && b.mode == modeSemaphore:
		return true
	}
	return false
}

// S1: believed-held intervals of incompatible grants of one key overlap;
// for a semaphore, more permits believed held at once than its limit.
func checkS1(r *result, grants []*grant, limits map[string][]operation) {
	byKey := map[string][]*grant{}
	for _, g := range grants {
		byKey[g.key] = append(byKey[g.key], g)
	}
	for key, gs := range byKey {
		sort.Slice(gs, func(i, j int) bool { return gs[i].start < gs[j].start })
		for i := range gs {
			for j := i + 1; j < len(gs) && gs[j].start < gs[i].end; j++ {
				if compatible(gs[i], gs[j]) {
					continue
				}
				ov := min(gs[i].end, gs[j].end) - gs[j].start
				if ov <= 0 {
					continue
				}
				r.S1MaxOverlap = max(r.S1MaxOverlap, ov)
				r.add(invS1, 1, "key %s: %s fence %d (proc %d) believed held until %s, %s fence %d (proc %d) from %s: overlap %s",
					key, modeName(gs[i]), gs[i].lock.Fence, gs[i].proc, dur(gs[i].end), modeName(gs[j]), gs[j].lock.Fence, gs[j].proc,
					dur(gs[j].start), dur(ov))
			}
		}
		checkSemaphore(r, key, gs, limits[key])
	}
}

func modeName(g *grant) string {
	switch {
	case g.mode == modeShared:
		return "reader"
	case g.mode == modeSemaphore:
		return fmt.Sprintf("%d permit(s)", g.permits)
	case g.group != "":
		return "reentrant " + short(strings.TrimPrefix(g.group, "reentrant:"))
	}
	return "writer"
}

// checkSemaphore sweeps the believed-held intervals of a semaphore's
// grants: the permits held at once must not exceed the limit in force.
// The limit is the largest that may be in force: the grants' own, raised
// by any SetLimit called before (a cut is not trusted to have applied),
// unless another SetLimit that succeeded replaced it before the grant's
// acquire was called (mayApply). Grants an admin release gave back are
// counted until its call (endByAdmin).
func checkSemaphore(r *result, key string, gs []*grant, sets []operation) {
	type ev struct {
		t int64
		d int
		g *grant
	}
	var evs []ev
	for _, g := range gs {
		if g.mode == modeSemaphore && g.end > g.start {
			evs = append(evs, ev{g.start, g.permits, g}, ev{g.end, -g.permits, g})
		}
	}
	if len(evs) == 0 {
		return
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].t != evs[j].t {
			return evs[i].t < evs[j].t
		}
		return evs[i].d < evs[j].d // an end before a start at the same instant
	})
	held := 0
	reported := 0
	for _, e := range evs {
		held += e.d
		if e.d <= 0 {
			continue
		}
		limit := e.g.limit
		for _, s := range sets {
			if s.Call <= e.t && s.Limit > limit && mayApply(s, sets, e.g.lock.Call) {
				limit = s.Limit
			}
		}
		if limit > 0 && held > limit && reported < 3 {
			reported++
			r.add(invS1, 1, "semaphore %s: %d permits believed held at %s, limit %d (grant fence %d, proc %d)",
				key, held, dur(e.t), limit, e.g.lock.Fence, e.g.proc)
		}
	}
}

// mayApply reports whether the SetLimit s may be in force for a grant
// whose acquire was called at t: no SetLimit that succeeded was called
// after s returned and returned itself before t (a SetLimit whose outcome
// is unknown may land at any time).
func mayApply(s operation, sets []operation, t int64) bool {
	for _, s2 := range sets {
		if s2.Status == evOK && s.Return != never && s2.Call > s.Return && s2.Return < t {
			return false
		}
	}
	return true
}

// S2: the resource's view and the fences themselves.
func checkS2(r *result, ops []operation, grants []*grant) {
	byOwner := map[string]*grant{}
	for _, g := range grants {
		byOwner[g.owner] = g
		if g.group != "" {
			byOwner[g.group] = g // a hold's handles write as their group
		}
	}
	writes := map[string][]operation{}
	reads := map[string][]operation{}
	for _, op := range ops {
		switch op.Kind {
		case kindWrite:
			writes[op.Key] = append(writes[op.Key], op)
			if op.Status == evFail {
				r.StaleRefused++
			}
			if g := byOwner[op.Owner]; g != nil && op.Call > g.end {
				r.StaleAttempted++
			}
		case kindRead:
			if op.Status == evOK {
				reads[op.Key] = append(reads[op.Key], op)
			}
		}
	}
	newerThan := func(a operation, f uint64, o string) bool { // a's fence supersedes (f, o)
		return a.Fence > f || (a.Fence == f && a.Owner != o)
	}
	for key, ws := range writes {
		for _, w := range ws {
			if w.Status != evOK {
				continue
			}
			for _, prev := range ws {
				if prev.Status == evOK && prev.Return < w.Call && newerThan(prev, w.Fence, w.Owner) {
					r.StaleAccepted++
					r.add(invS2, 1, "%s: write with fence %d accepted after fence %d had been", key, w.Fence, prev.Fence)
					break
				}
			}
		}
		for _, rd := range reads[key] {
			for _, prev := range ws {
				if prev.Status == evOK && prev.Return < rd.Call && newerThan(prev, rd.Fence, rd.Owner) {
					r.StaleAccepted++
					r.add(invS2, 1, "%s: read fence %d after a write with fence %d had been accepted: a stale write overwrote it",
						key, rd.Fence, prev.Fence)
					break
				}
			}
		}
	}
	byKey := map[string][]*grant{}
	for _, g := range grants {
		byKey[g.key] = append(byKey[g.key], g)
	}
	// One fence per hold: a reentrant hold's handles share it; protocols
	// without fences (legacy) grant 0.
	holdOf := func(g *grant) string {
		if g.group != "" {
			return g.group
		}
		return g.owner
	}
	for key, gs := range byKey {
		seen := map[uint64]string{}
		for _, g := range gs {
			if g.lock.Fence == 0 {
				continue
			}
			if o, ok := seen[g.lock.Fence]; ok && o != holdOf(g) {
				r.DupFences++
				r.add(invS2, 1, "%s: fence %d granted twice", key, g.lock.Fence)
			}
			seen[g.lock.Fence] = holdOf(g)
		}
		for _, a := range gs {
			for _, b := range gs {
				if a.lock.Fence == 0 || b.lock.Fence == 0 || (a.group != "" && a.group == b.group) {
					continue
				}
				if a.lock.End < b.lock.Call && b.lock.Fence < a.lock.Fence {
					r.Regressions++
					r.add(invS2, 1, "%s: fence %d granted after fence %d", key, b.lock.Fence, a.lock.Fence)
				}
			}
		}
	}
}

// S3: porcupine.
func checkS3(r *result, ops []operation, p params) {
	h := modelOps(ops, p.FencedResource)
	if len(h) == 0 {
		return
	}
	timeout := p.S3Timeout
	if timeout == 0 {
		timeout = 20 * time.Second
	}
	res, info := porcupine.CheckOperationsVerbose(model(), h, timeout)
	switch res {
	case porcupine.Illegal:
		r.S3Illegal++
		r.add(invS3, 1, "history not linearizable (%d operations)", len(h))
		if r.Illegal == nil {
			r.Illegal = &info
		}
	case porcupine.Unknown:
		r.S3Unk++
	}
}

// R2: the loss signal came by the deadline (+ slack), unless the holder's
// own process was stopped then. A grant whose reply arrived after its
// deadline can only be signalled lost when it arrives.
func checkR2(r *result, ops []operation, grants []*grant, p params, paused func(int, int64, int64) bool) {
	granted := map[string]int64{}
	for _, g := range grants {
		granted[g.owner] = g.start
	}
	for _, op := range ops {
		if op.Kind != kindLost {
			continue
		}
		from := max(op.Deadline, granted[op.Owner])
		lag := op.Call - from
		if lag > 0 && paused(op.Proc, op.Deadline, op.Call) {
			r.R2Exempt++
			continue
		}
		if st := r.stalled(from, op.Call); lag > int64(p.R2Slack) && lag-st <= int64(p.R2Slack) {
			r.R2Stalled++ // late by the time the process was not scheduled
			r.R2MaxLag = max(r.R2MaxLag, lag-st)
			r.worst(&r.R2Worst, lag-st, op, from, op.Call, "loss signal")
			continue
		}
		r.R2MaxLag = max(r.R2MaxLag, lag)
		r.worst(&r.R2Worst, lag, op, from, op.Call, "loss signal")
		if lag > int64(p.R2Slack) {
			r.add(invR2, 1, "%s fence %d: loss signalled %s after the deadline", op.Key, op.Fence, dur(lag))
		}
	}
}

// L1: Lock returned by its context's deadline (+ slack).
func checkL1(r *result, ops []operation, p params, paused func(int, int64, int64) bool) {
	for _, op := range ops {
		if (op.Kind != kindLock && op.Kind != kindTry) || op.CtxDeadline == 0 || op.End == 0 {
			continue
		}
		over := op.End - op.CtxDeadline
		if over <= int64(p.L1Slack) {
			r.L1MaxOver = max(r.L1MaxOver, over)
			r.worst(&r.L1Worst, over, op, op.CtxDeadline, op.End, string(op.Kind))
			continue
		}
		if paused(op.Proc, op.CtxDeadline, op.End) {
			continue
		}
		if over-r.stalled(op.CtxDeadline, op.End) <= int64(p.L1Slack) {
			r.L1Stalled++
			continue
		}
		r.L1MaxOver = max(r.L1MaxOver, over)
		r.worst(&r.L1Worst, over, op, op.CtxDeadline, op.End, string(op.Kind))
		r.add(invL1, 1, "%s: Lock returned %s after its context's deadline", op.Key, dur(over))
	}
}

// Hand-overs: release → the next grant of a waiter that was already
// waiting; crash → the next grant (L2).
func checkHandovers(r *result, grants []*grant, ops []operation, p params, crashes map[int]int64) {
	byKey := map[string][]*grant{}
	for _, g := range grants {
		byKey[g.key] = append(byKey[g.key], g)
	}
	for key, gs := range byKey {
		sort.Slice(gs, func(i, j int) bool { return gs[i].start < gs[j].start })
		for i, g := range gs {
			var next *grant
			for _, n := range gs[i+1:] {
				if n.owner != g.owner {
					next = n
					break
				}
			}
			switch {
			case g.crashed:
				if next == nil {
					if waiting(ops, key, g.crashAt, crashes, p.L2Bound) {
						r.add(invL2, 1, "%s: nobody got the lock after its holder crashed", key)
					}
					continue
				}
				d := next.start - g.crashAt
				r.CrashHandovers = append(r.CrashHandovers, d)
				if p.L2Bound > 0 && d > int64(p.L2Bound) {
					r.add(invL2, 1, "%s: hand-over %s after the holder crashed (bound %v)", key, dur(d), p.L2Bound)
				}
			case g.unlock != nil && g.unlock.Status == evOK && next != nil && next.lock.Call < g.unlock.Call &&
				next.start >= g.unlock.Call:
				r.Handovers = append(r.Handovers, next.start-g.unlock.Call)
				r.Handoffs++
			}
		}
	}
}

// waiting reports whether a Lock call on key was in progress at t, by a
// process that was not itself killed within bound of t.
func waiting(ops []operation, key string, t int64, crashes map[int]int64, bound time.Duration) bool {
	window := int64(max(bound, time.Second))
	for _, op := range ops {
		if c, ok := crashes[op.Proc]; ok && c <= t+window {
			continue
		}
		if op.Kind == kindLock && op.Key == key && op.Call <= t && (op.End == 0 || op.End >= t) {
			return true
		}
	}
	return false
}

// percentile returns the q-quantile (0..1) of xs (0 if empty).
func percentile(xs []int64, q float64) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s)-1) + 0.5)
	return s[min(i, len(s)-1)]
}

// worstCase is the worst case of a bound (R2's lag, L1's overrun): by how
// much, and an account of it: the operation (its kind of lock, key, outcome
// or loss cause) and the faults and pauses that overlapped its late part.
type worstCase struct {
	By   int64
	What string
}

func (w *worstCase) keep(o worstCase) {
	if o.By > w.By {
		*w = o
	}
}

// worst makes op, late by `by` between from and to, the worst case in w if
// it is.
func (r *result) worst(w *worstCase, by int64, op operation, from, to int64, what string) {
	if by <= w.By || by <= 0 {
		return
	}
	kind := op.Mode
	switch {
	case op.Group != "":
		kind = "reentrant"
	case kind == modeSemaphore:
		kind = "semaphore"
	case kind == "":
		kind = "exclusive"
	}
	outcome := string(op.Status)
	if op.Err != "" {
		outcome += ": " + op.Err
	}
	w.By = by
	w.What = fmt.Sprintf("%s %s of %s %s (%s); the process was not scheduled for %s of it; late part %s",
		dur(by), what, kind, op.Key, outcome, dur(r.stalled(from, to)), lateParts(r.spans, op.Key, from, to))
}

// lateParts lists the faults and pauses overlapping [from, to] that concern
// key or the whole process (those of another key are left out), with
// how much of the window each covers, the longest first.
func lateParts(spans []operation, key string, from, to int64) string {
	type part struct {
		note string
		d    int64
	}
	var ps []part
	for _, s := range spans {
		if s.End < from || s.Call > to {
			continue
		}
		if s.Key != "" && s.Key != key {
			continue
		}
		note := s.Note
		if s.Proc == stallProc {
			note = "process not scheduled"
		}
		ps = append(ps, part{note, min(s.End, to) - max(s.Call, from)})
	}
	if len(ps) == 0 {
		return "overlapped by no recorded fault"
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].d > ps[j].d })
	var out []string
	for i, p := range ps {
		if i == 6 {
			out = append(out, fmt.Sprintf("and %d more", len(ps)-i))
			break
		}
		out = append(out, fmt.Sprintf("%s (%s)", p.note, dur(p.d)))
	}
	return "overlapped by " + strings.Join(out, ", ")
}
