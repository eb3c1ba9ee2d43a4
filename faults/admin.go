package faults

import (
	"slices"
	"strings"
)

// Admin releases (an operator's ReleaseToken of one holder's token, or
// ForceRelease of every holder) end grants their holders still believe
// they hold: from the release on, those permits are not the holder's to
// count. The checker counts a grant an admin release may have given back
// until the release's call at most; one that returned after that call (a
// hand-off confirmed while the release ran) is not counted at all. In the
// model, the release drops its targets at its linearization point; a
// ForceRelease of a semaphore, which releases the holders it found one
// script each, is one model operation per target, so each is dropped at
// its own point while it runs (or missed: a grant that returned meanwhile
// goes before its drop or after it, as the holder's later operations
// need, independently of the other targets); an Unlock that a
// ReleaseToken's tombstone made succeed is legal without a holder.

// adminRelease is an admin release that may have applied (ok or unknown)
// and the grants it may have ended, by owner.
type adminRelease struct {
	op      operation
	targets map[string]bool
}

// adminReleases returns the admin releases of ops that may have applied.
// A ReleaseToken targets its token. A ForceRelease targets every owner
// granted its key by an acquire called before the release returned (it
// releases the holders it finds, and nobody can be a holder before its
// acquire was called).
func adminReleases(ops []operation) []adminRelease {
	var out []adminRelease
	for _, op := range ops {
		if op.Status == evFail || (op.Kind != kindReleaseToken && op.Kind != kindForceRelease) {
			continue
		}
		a := adminRelease{op: op, targets: map[string]bool{}}
		if op.Kind == kindReleaseToken {
			a.targets[op.Owner] = true
		}
		for _, g := range ops {
			if op.Kind == kindForceRelease && (g.Kind == kindLock || g.Kind == kindTry) && g.Status == evOK &&
				g.Key == op.Key && (op.End == 0 || g.Call < op.End) {
				a.targets[g.Owner] = true
			}
		}
		out = append(out, a)
	}
	return out
}

// endByAdmin ends the believed-held interval of every grant an admin
// release may have given back (see the top of this file).
func endByAdmin(grants []*grant, admins []adminRelease) {
	for _, a := range admins {
		for _, g := range grants {
			if g.key != a.op.Key || !a.targets[g.owner] {
				continue
			}
			if g.start >= a.op.Call {
				g.end = g.start
			} else {
				g.end = min(g.end, a.op.Call)
			}
		}
	}
}

// adminModelOps returns the admin releases as model operations (the
// targets' owners, sorted and joined with ","), and tombstoned, which
// reports whether op is an Unlock that a ReleaseToken of its token may
// have answered for (the release leaves the holder's tombstone, so the
// holder's Unlock succeeds after it). Every other operation of a target
// stays in the model: a renewal or Unlock that found the permits gone is
// ordered after the release, one that did not before it, as their times
// allow.
func adminModelOps(ops []operation) (admin []operation, tombstoned func(operation) bool) {
	admins := adminReleases(ops)
	for _, a := range admins {
		op := a.op
		owners := make([]string, 0, len(a.targets))
		for o := range a.targets {
			owners = append(owners, o)
		}
		slices.Sort(owners)
		if op.Kind == kindForceRelease && semaphoreKey(ops, op.Key) {
			// One script per holder it found: each target is released at
			// its own point (or missed), not all at once.
			for _, o := range owners {
				if !endedBefore(ops, op.Key, o, op.Call) {
					one := op
					one.Owner = o
					admin = append(admin, one)
				}
			}
			continue
		}
		op.Owner = strings.Join(owners, ",")
		admin = append(admin, op)
	}
	tombstoned = func(op operation) bool {
		if op.Kind != kindUnlock || op.Status != evOK {
			return false
		}
		return slices.ContainsFunc(admins, func(a adminRelease) bool {
			return a.op.Kind == kindReleaseToken && a.op.Key == op.Key && a.op.Owner == op.Owner && a.op.Call < op.Return
		})
	}
	return admin, tombstoned
}

// stepAdmin drops the release's targets (see adminModelOps): for certain
// if it succeeded, maybe if its outcome is unknown.
func stepAdmin(s mState, i mInput) []any {
	targets := strings.Split(i.Owner, ",")
	next := s.with(slices.DeleteFunc(slices.Clone(s.Holders), func(h holder) bool {
		return slices.Contains(targets, h.Owner)
	}))
	if i.Status == evOK {
		return []any{next}
	}
	return []any{s, next}
}

// semaphoreKey reports whether key is a semaphore's: one of ops granted it
// as one.
func semaphoreKey(ops []operation, key string) bool {
	return slices.ContainsFunc(ops, func(g operation) bool {
		return g.Key == key && (g.Kind == kindLock || g.Kind == kindTry) && g.Mode == modeSemaphore
	})
}

// endedBefore reports whether owner's hold of key ended (its Unlock
// returned, ok or not) before t: an admin release called at t cannot
// meet it.
func endedBefore(ops []operation, key, owner string, t int64) bool {
	return slices.ContainsFunc(ops, func(u operation) bool {
		return u.Kind == kindUnlock && u.Key == key && u.Owner == owner && u.Status != evInfo && u.Return < t
	})
}
