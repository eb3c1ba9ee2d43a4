package faults

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The model S3 checks histories against: per lock key, a lease-aware set
// of holders with fences; per protected resource, a fenced register.
// porcupine ships no lock model; this one is written for dlock's
// guarantees.
//
// Lock object (one per key). State: the holders (each with its token, its
// mode, its reentrant group, its permits and the earliest moment its lease
// can expire on the server, minExp), the last fence granted, and the limit
// a SetLimit stored. A grant or renewal sent at s with TTL ttl sets the
// lease's expiry at its execution time + ttl, and execution comes after s,
// so the lease cannot lapse before s + ttl (less expirySlack for Redis's
// millisecond clock). A holder "may have lapsed" at t if t ≥ its minExp.
//
//	grant ok (token t, fence f): every holder it conflicts with may have
//	  lapsed (and is dropped). A writer (a plain, multi-key, legacy or
//	  redlock grant, or a reentrant group) conflicts with every holder of
//	  another group; a reader with every non-reader. A semaphore grant of
//	  p permits fits: p plus the permits of the holders kept is at most the
//	  limit (the stored one if set, else the caller's); which of the
//	  holders that may have lapsed are kept is a nondeterministic choice.
//	  f > last fence, or f is the fence of a live handle of t's reentrant
//	  group (a join); protocols without fences (0) are not checked.
//	renew ok (t): legal only if t holds; its minExp moves out.
//	unlock ok (t): legal only if t holds (or a ReleaseToken of t may have
//	  run before it); it is dropped.
//	releasetoken, forcerelease ok (targets): the targets are dropped;
//	  unknown: they are dropped or not (see admin.go). A semaphore's
//	  forcerelease is one such operation per target (not atomic).
//	renew/unlock found the lock gone (fail): legal if t does not hold, or
//	  its lease may have lapsed (the library also reports a loss locally
//	  at its deadline, minExp less the drift); it is dropped. A reentrant
//	  handle reported lost at its deadline may also still be live on the
//	  server (a renewal in flight landed late; the release the Unlock
//	  tried did not run), holding its owner's hold up: either it is
//	  dropped, or it stays as an orphan that no later operation names,
//	  so the owner's next handle may join the hold with its fence.
//	  Another group's grant drops an orphan once it may have lapsed, as
//	  any holder; a new hold of its own group (a fresh fence) drops it.
//	unlock unknown: t holds as before, or is dropped.
//	setlimit ok: the stored limit is set (0 removes it); unknown: either.
//	grant fail or unknown, renew unknown: no effect (a lost acquire is
//	  deleted by the library; its fence is never used).
//
// Resource object (one per key). State: the last accepted fence and owner.
//
//	write ok (f, o): legal if f is newer (f > last, or f = last and o the
//	  same owner). write refused: legal if not. write unknown: either.
//	read (f, o): legal if (f, o) is the state.
//
// The model is nondeterministic only for unknown outcomes and for which
// lapsable semaphore holders a grant found gone.

// expirySlack absorbs Redis's millisecond expiry arithmetic.
const expirySlack = int64(2 * time.Millisecond)

type mInput struct {
	Kind    opKind
	Owner   string
	Fence   uint64 // writes
	Sent    int64  // grants, renewals
	TTL     int64
	Drift   int64
	Ret     int64 // when the call returned
	Status  eventType
	Mode    string
	Group   string
	Limit   int
	Permits int
	// Tombstoned: an Unlock a ReleaseToken of its token may have answered
	// for (see adminModelOps).
	Tombstoned bool
}

type mOutput struct {
	Fence uint64 // grants, reads
	Owner string // reads
}

type holder struct {
	Owner, Group, Mode string
	Permits            int
	Fence              uint64
	MinExp             int64
}

type mState struct {
	Holders []holder // sorted by Owner; never modified in place
	Fence   uint64
	Limit   int
	// The resource's register.
	RFence uint64
	ROwner string
}

func equalState(a, b mState) bool {
	return a.Fence == b.Fence && a.Limit == b.Limit && a.RFence == b.RFence && a.ROwner == b.ROwner &&
		slices.Equal(a.Holders, b.Holders)
}

func newer(s mState, f uint64, o string) bool {
	return f > s.RFence || (f == s.RFence && o == s.ROwner && o != "")
}

// orphanOf names the orphan a lost reentrant handle leaves (see
// stepModel); tokens have no '~'.
func orphanOf(owner string) string { return "~" + owner }

func isOrphan(h holder) bool { return strings.HasPrefix(h.Owner, "~") }

func (s mState) find(owner string) int {
	return slices.IndexFunc(s.Holders, func(h holder) bool { return h.Owner == owner })
}

func (s mState) with(hs []holder) mState {
	slices.SortFunc(hs, func(a, b holder) int { return strings.Compare(a.Owner, b.Owner) })
	s.Holders = hs
	return s
}

func (s mState) without(owner string) mState {
	return s.with(slices.DeleteFunc(slices.Clone(s.Holders), func(h holder) bool { return h.Owner == owner }))
}

// conflicts reports whether a grant (i) cannot be held beside h.
func conflicts(i mInput, h holder) bool {
	switch {
	case h.Owner == i.Owner:
		return false
	case i.Group != "" && h.Group == i.Group:
		return false
	case i.Mode == modeShared && h.Mode == modeShared:
		return false
	case i.Mode == modeSemaphore && h.Mode == modeSemaphore:
		return false // counted, not paired
	}
	return true
}

// maxLapseChoices bounds the semaphore grant's nondeterminism: with more
// holders that may have lapsed, they are all taken as gone.
const maxLapseChoices = 6

func stepGrant(s mState, i mInput, o mOutput) []any {
	if i.Status == evInfo && i.Group != "" {
		// A reentrant acquire with an unknown outcome may have left a
		// handle nobody holds (until its clean-up or TTL): the owner's
		// hold may go on, and a later handle join it with its fence.
		anon := holder{Owner: fmt.Sprintf("?%d", i.Sent), Group: i.Group, Fence: 0, MinExp: i.Sent}
		return []any{s, s.with(append(slices.Clone(s.Holders), anon))}
	}
	if i.Status != evOK {
		return []any{s}
	}
	if o.Fence != 0 {
		join := i.Group != "" && slices.ContainsFunc(s.Holders, func(h holder) bool {
			return h.Group == i.Group && (h.Fence == o.Fence || h.Fence == 0)
		})
		if o.Fence <= s.Fence && !join {
			return nil // fences must strictly increase (a reentrant join shares its hold's)
		}
	}
	var kept, lapsable []holder
	for _, h := range s.Holders {
		switch {
		case h.Owner == i.Owner:
			// The same token granted again: its old lease is replaced.
		case isOrphan(h) && h.Group == i.Group && o.Fence > s.Fence:
			// A new hold of the orphan's owner: the old hold has ended.
		case conflicts(i, h):
			if i.Ret < h.MinExp {
				return nil // a conflicting holder's lease cannot have lapsed yet
			}
		case i.Mode == modeSemaphore && i.Ret >= h.MinExp:
			lapsable = append(lapsable, h)
		default:
			kept = append(kept, h)
		}
	}
	me := holder{Owner: i.Owner, Group: i.Group, Mode: i.Mode, Permits: max(i.Permits, 1), Fence: o.Fence,
		MinExp: i.Sent + i.TTL - expirySlack}
	next := s
	next.Fence = max(s.Fence, o.Fence)
	if i.Mode != modeSemaphore {
		return []any{next.with(append(slices.Clone(kept), me))}
	}
	limit := i.Limit
	if s.Limit > 0 {
		limit = s.Limit
	}
	used := me.Permits
	for _, h := range kept {
		used += h.Permits
	}
	if limit > 0 && used > limit {
		return nil // more permits than the limit, even if every lapsable holder is gone
	}
	if len(lapsable) > maxLapseChoices {
		return []any{next.with(append(slices.Clone(kept), me))}
	}
	var out []any
	for mask := range 1 << len(lapsable) {
		hs, u := append(slices.Clone(kept), me), used
		for b, h := range lapsable {
			if mask&(1<<b) != 0 {
				hs = append(hs, h)
				u += h.Permits
			}
		}
		if limit <= 0 || u <= limit {
			out = append(out, next.with(hs))
		}
	}
	return out
}

func stepModel(st, in, out any) []any {
	s, i, o := st.(mState), in.(mInput), out.(mOutput)
	switch i.Kind {
	case kindLock, kindTry:
		return stepGrant(s, i, o)
	case kindRenew, kindExtend, kindUnlock:
		at := s.find(i.Owner)
		switch i.Status {
		case evOK:
			if at < 0 && i.Tombstoned {
				return []any{s} // released by ReleaseToken first
			}
			if at < 0 {
				return nil // renewed or released a lock it did not hold
			}
			if i.Kind == kindUnlock {
				return []any{s.without(i.Owner)}
			}
			hs := slices.Clone(s.Holders)
			hs[at].MinExp = max(hs[at].MinExp, i.Sent+i.TTL-expirySlack)
			s.Holders = hs
			return []any{s}
		case evFail:
			if at < 0 {
				return []any{s}
			}
			h := s.Holders[at]
			if i.Ret < h.MinExp-i.Drift-expirySlack {
				return nil // reported gone while the lease cannot have lapsed
			}
			if h.Group == "" {
				return []any{s.without(i.Owner)}
			}
			// A reentrant handle may live on as an orphan of its hold (its
			// release, if any, did not run).
			hs := slices.Clone(s.Holders)
			hs[at].Owner = orphanOf(h.Owner)
			return []any{s.without(i.Owner), s.with(hs)}
		default:
			if i.Kind == kindUnlock && at >= 0 {
				return []any{s, s.without(i.Owner)}
			}
			return []any{s}
		}
	case kindReleaseToken, kindForceRelease:
		return stepAdmin(s, i)
	case kindSetLimit:
		next := s
		next.Limit = i.Limit
		switch i.Status {
		case evOK:
			return []any{next}
		case evFail:
			return []any{s}
		default:
			return []any{s, next}
		}
	case kindWrite:
		ok := newer(s, i.Fence, i.Owner)
		next := s
		next.RFence, next.ROwner = i.Fence, i.Owner
		switch i.Status {
		case evOK:
			if !ok {
				return nil
			}
			return []any{next}
		case evFail:
			if ok {
				return nil
			}
			return []any{s}
		default:
			if ok {
				return []any{s, next}
			}
			return []any{s}
		}
	case kindRead:
		if s.RFence != o.Fence || s.ROwner != o.Owner {
			return nil
		}
		return []any{s}
	}
	return []any{s}
}

// model returns the porcupine model. Operations are partitioned per lock
// key and per resource, which porcupine checks independently
// (linearizability is compositional).
func model() porcupine.Model {
	m := porcupine.NondeterministicModel{
		Init: func() []any { return []any{mState{}} },
		Step: stepModel,
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			groups := map[string][]porcupine.Operation{}
			var order []string
			for _, op := range h {
				k := partitionOf(op)
				if _, ok := groups[k]; !ok {
					order = append(order, k)
				}
				groups[k] = append(groups[k], op)
			}
			out := make([][]porcupine.Operation, 0, len(order))
			for _, k := range order {
				out = append(out, groups[k])
			}
			return out
		},
		Equal: func(a, b any) bool { return equalState(a.(mState), b.(mState)) },
		DescribeOperation: func(in, out any) string {
			i, o := in.(mInput), out.(mOutput)
			switch i.Kind {
			case kindLock, kindTry:
				return fmt.Sprintf("%s %s %s → %d", i.Kind, short(i.Owner), i.Status, o.Fence)
			case kindWrite:
				return fmt.Sprintf("write %d/%s %s", i.Fence, short(i.Owner), i.Status)
			case kindRead:
				return fmt.Sprintf("read → %d/%s", o.Fence, short(o.Owner))
			}
			return fmt.Sprintf("%s %s %s", i.Kind, short(i.Owner), i.Status)
		},
		DescribeState: func(st any) string {
			s := st.(mState)
			if s.Holders == nil && s.Fence == 0 {
				return fmt.Sprintf("resource fence=%d owner=%s", s.RFence, short(s.ROwner))
			}
			var b strings.Builder
			fmt.Fprintf(&b, "fence=%d", s.Fence)
			if s.Limit > 0 {
				fmt.Fprintf(&b, " limit=%d", s.Limit)
			}
			for _, h := range s.Holders {
				fmt.Fprintf(&b, " %s%s/%d(minExp %s)", h.Mode, short(h.Owner), h.Fence, dur(h.MinExp))
			}
			return b.String()
		},
	}
	return m.ToModel()
}

func partitionOf(op porcupine.Operation) string {
	return op.Metadata.(string)
}

func short(s string) string {
	if len(s) > 6 {
		return s[:6]
	}
	return s
}

// modelOps converts a history's operations to porcupine's, leaving out
// those that cannot change the model (failed or unknown grants, unknown
// renewals, losses, faults), which keeps the search small. With
// fencedResource false the resource is not a fenced register (a plain
// SET), and its operations are left out too.
func modelOps(ops []operation, fencedResource bool) []porcupine.Operation {
	var out []porcupine.Operation
	admin, tombstoned := adminModelOps(ops)
	all := slices.DeleteFunc(slices.Clone(ops), func(op operation) bool {
		return op.Kind == kindReleaseToken || op.Kind == kindForceRelease
	})
	for _, op := range append(all, admin...) {
		in := mInput{Kind: op.Kind, Owner: op.Owner, Fence: op.Fence, Sent: op.Sent, TTL: op.TTL, Drift: op.Drift,
			Ret: op.End, Status: op.Status, Mode: op.Mode, Group: op.Group, Limit: op.Limit, Permits: op.Permits,
			Tombstoned: tombstoned(op)}
		part := "lock " + op.Key
		switch op.Kind {
		case kindLock, kindTry:
			if op.Status == evInfo && op.Group != "" {
				in.Sent = op.Call // the earliest it can have been sent
				break
			}
			if op.Status != evOK {
				continue
			}
		case kindRenew, kindExtend:
			if op.Status == evInfo {
				continue
			}
		case kindUnlock, kindSetLimit:
		case kindReleaseToken, kindForceRelease: // as adminModelOps made them
		case kindWrite, kindRead:
			if !fencedResource || (op.Kind == kindRead && op.Status != evOK) {
				continue
			}
			part = "resource " + op.Key
		default:
			continue
		}
		ret := op.Return
		if ret == never {
			ret = never - 1
		}
		out = append(out, porcupine.Operation{ClientId: max(op.Proc, 0), Input: in,
			Output: mOutput{Fence: op.Fence, Owner: op.Owner}, Call: op.Call, Return: ret, Metadata: part})
	}
	return out
}
