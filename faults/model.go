package faults

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// The model S3 checks histories against: a lease-aware fenced mutex per
// lock key, and a fenced register per protected resource. porcupine ships
// no lock model; this one is written for dlock's guarantees.
//
// Lock object (one per key). State: the owner's token ("" free), the last
// fence granted, and the earliest moment the owner's lease can expire on
// the server (minExp). A grant or renewal sent at s with TTL ttl sets the
// key's expiry at its execution time + ttl, and execution comes after s,
// so the lease cannot lapse before s + ttl (less expirySlack for Redis's
// millisecond clock).
//
//	grant ok (token t, fence f): legal if the lock is free, or already t's,
//	  or the owner's lease may have lapsed (the call returned at or after
//	  minExp); and f > last fence. The owner becomes t.
//	renew ok (t): legal only if t owns the lock; minExp moves out.
//	unlock ok (t): legal only if t owns the lock; it becomes free.
//	renew/unlock found the lock gone (fail): legal if t does not own it,
//	  or its lease may have lapsed (the library also reports a loss
//	  locally at its deadline, minExp less the drift); it becomes free.
//	unlock unknown: the lock is t's as before, or free.
//	grant fail or unknown, renew unknown: no effect (a lost acquire is
//	  deleted by the library; its fence is never used).
//
// Resource object (one per key). State: the last accepted fence and owner.
//
//	write ok (f, o): legal if f is newer (f > last, or f = last and o the
//	  same owner). write refused: legal if not. write unknown: either.
//	read (f, o): legal if (f, o) is the state.
//
// The model is nondeterministic only for unknown outcomes.

// expirySlack absorbs Redis's millisecond expiry arithmetic.
const expirySlack = int64(2 * time.Millisecond)

type mInput struct {
	Kind   Kind
	Owner  string
	Fence  uint64 // writes
	Sent   int64  // grants, renewals
	TTL    int64
	Drift  int64
	Ret    int64 // when the call returned
	Status EventType
}

type mOutput struct {
	Fence uint64 // grants, reads
	Owner string // reads
}

type mState struct {
	Owner  string
	Fence  uint64
	MinExp int64
}

func newer(s mState, f uint64, o string) bool {
	return f > s.Fence || (f == s.Fence && o == s.Owner && o != "")
}

func stepModel(st, in, out any) []any {
	s, i, o := st.(mState), in.(mInput), out.(mOutput)
	switch i.Kind {
	case KLock, KTry:
		if i.Status != OK {
			return []any{s}
		}
		if s.Owner != "" && s.Owner != i.Owner && i.Ret < s.MinExp {
			return nil // the owner's lease cannot have lapsed yet
		}
		if o.Fence <= s.Fence {
			return nil // fences must strictly increase
		}
		return []any{mState{Owner: i.Owner, Fence: o.Fence, MinExp: i.Sent + i.TTL - expirySlack}}
	case KRenew, KExtend, KUnlock:
		switch i.Status {
		case OK:
			if s.Owner != i.Owner {
				return nil // renewed or released a lock it did not own
			}
			if i.Kind == KUnlock {
				return []any{mState{Fence: s.Fence}}
			}
			s.MinExp = max(s.MinExp, i.Sent+i.TTL-expirySlack)
			return []any{s}
		case Fail:
			if s.Owner != i.Owner {
				return []any{s}
			}
			if i.Ret < s.MinExp-i.Drift-expirySlack {
				return nil // reported gone while the lease cannot have lapsed
			}
			return []any{mState{Fence: s.Fence}}
		default:
			if i.Kind == KUnlock && s.Owner == i.Owner {
				return []any{s, mState{Fence: s.Fence}}
			}
			return []any{s}
		}
	case KWrite:
		ok := newer(s, i.Fence, i.Owner)
		next := mState{Owner: i.Owner, Fence: i.Fence}
		switch i.Status {
		case OK:
			if !ok {
				return nil
			}
			return []any{next}
		case Fail:
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
	case KRead:
		if s.Fence != o.Fence || s.Owner != o.Owner {
			return nil
		}
		return []any{s}
	}
	return []any{s}
}

// Model returns the porcupine model. Operations are partitioned per lock
// key and per resource, which porcupine checks independently
// (linearizability is compositional).
func Model() porcupine.Model {
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
		Equal: func(a, b any) bool { return a.(mState) == b.(mState) },
		DescribeOperation: func(in, out any) string {
			i, o := in.(mInput), out.(mOutput)
			switch i.Kind {
			case KLock, KTry:
				return fmt.Sprintf("%s %s %s → %d", i.Kind, short(i.Owner), i.Status, o.Fence)
			case KWrite:
				return fmt.Sprintf("write %d/%s %s", i.Fence, short(i.Owner), i.Status)
			case KRead:
				return fmt.Sprintf("read → %d/%s", o.Fence, short(o.Owner))
			}
			return fmt.Sprintf("%s %s %s", i.Kind, short(i.Owner), i.Status)
		},
		DescribeState: func(st any) string {
			s := st.(mState)
			return fmt.Sprintf("owner=%s fence=%d minExp=%s", short(s.Owner), s.Fence, Dur(s.MinExp))
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

// ModelOps converts a history's operations to porcupine's, leaving out
// those that cannot change the model (failed or unknown grants, unknown
// renewals, losses, faults), which keeps the search small. With
// fencedResource false the resource is not a fenced register (a plain
// SET), and its operations are left out too.
func ModelOps(ops []Op, fencedResource bool) []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range ops {
		in := mInput{Kind: op.Kind, Owner: op.Owner, Fence: op.Fence, Sent: op.Sent, TTL: op.TTL, Drift: op.Drift,
			Ret: op.End, Status: op.Status}
		part := "lock " + op.Key
		switch op.Kind {
		case KLock, KTry:
			if op.Status != OK {
				continue
			}
		case KRenew, KExtend:
			if op.Status == Info {
				continue
			}
		case KUnlock:
		case KWrite, KRead:
			if !fencedResource || (op.Kind == KRead && op.Status != OK) {
				continue
			}
			part = "resource " + op.Key
		default:
			continue
		}
		ret := op.Return
		if ret == Never {
			ret = Never - 1
		}
		out = append(out, porcupine.Operation{ClientId: max(op.Proc, 0), Input: in,
			Output: mOutput{Fence: op.Fence, Owner: op.Owner}, Call: op.Call, Return: ret, Metadata: part})
	}
	return out
}
