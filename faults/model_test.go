package faults

import "testing"

// The extended model and S1 on hand-made histories of semaphores, read
// locks and reentrant holds: what each primitive allows passes, one
// holder too many is caught by both S1 and S3.

func (h *hb) grantAs(proc int, key, owner string, fence uint64, call, ret, ttl int64, mode, group string, limit, permits int) {
	drift := ttl/100 + 2*ms
	h.op(event{Proc: proc, Kind: kindLock, Key: key, Fence: fence, Owner: owner, Sent: call, TTL: ttl, Drift: drift,
		Deadline: call + ttl - drift, Mode: mode, Group: group, Limit: limit, Permits: permits}, call, ret, evOK)
}

func TestModelSemaphore(t *testing.T) {
	ttl := 1000 * ms
	t.Run("within the limit", func(t *testing.T) {
		var h hb
		h.grantAs(0, "s", "A", 1, 0, 5*ms, ttl, modeSemaphore, "", 2, 1)
		h.grantAs(1, "s", "B", 2, 10*ms, 15*ms, ttl, modeSemaphore, "", 2, 1)
		h.unlock(0, "s", "A", 20*ms, 25*ms, evOK)
		h.grantAs(2, "s", "C", 3, 30*ms, 35*ms, ttl, modeSemaphore, "", 2, 1)
		expectOnly(t, h.check(t, defaultParams()))
	})
	t.Run("one over", func(t *testing.T) {
		var h hb
		h.grantAs(0, "s", "A", 1, 0, 5*ms, ttl, modeSemaphore, "", 2, 1)
		h.grantAs(1, "s", "B", 2, 10*ms, 15*ms, ttl, modeSemaphore, "", 2, 1)
		h.grantAs(2, "s", "C", 3, 30*ms, 35*ms, ttl, modeSemaphore, "", 2, 1)
		expectOnly(t, h.check(t, defaultParams()), invS1, invS3)
	})
	t.Run("permits count", func(t *testing.T) {
		var h hb
		h.grantAs(0, "s", "A", 1, 0, 5*ms, ttl, modeSemaphore, "", 3, 2)
		h.grantAs(1, "s", "B", 2, 10*ms, 15*ms, ttl, modeSemaphore, "", 3, 2)
		expectOnly(t, h.check(t, defaultParams()), invS1, invS3)
	})
	t.Run("a lapsed holder makes room", func(t *testing.T) {
		var h hb
		h.grantAs(0, "s", "A", 1, 0, 5*ms, 100*ms, modeSemaphore, "", 1, 1)
		h.grantAs(1, "s", "B", 2, 50*ms, 150*ms, ttl, modeSemaphore, "", 1, 1)
		expectOnly(t, h.check(t, defaultParams()))
	})
	t.Run("SetLimit cut", func(t *testing.T) {
		var h hb
		h.op(event{Proc: 9, Kind: kindSetLimit, Key: "s", Limit: 1}, 0, 1*ms, evOK)
		h.grantAs(0, "s", "A", 1, 2*ms, 5*ms, ttl, modeSemaphore, "", 3, 1)
		h.grantAs(1, "s", "B", 2, 10*ms, 15*ms, ttl, modeSemaphore, "", 3, 1)
		// S1 trusts only raises (the largest limit that may be in force):
		// S3 knows the stored limit.
		expectOnly(t, h.check(t, defaultParams()), invS3)
	})
}

func TestModelShared(t *testing.T) {
	ttl := 1000 * ms
	t.Run("readers together, then a writer", func(t *testing.T) {
		var h hb
		h.grantAs(0, "k", "R1", 1, 0, 5*ms, ttl, modeShared, "", 0, 0)
		h.grantAs(1, "k", "R2", 2, 10*ms, 15*ms, ttl, modeShared, "", 0, 0)
		h.unlock(0, "k", "R1", 20*ms, 25*ms, evOK)
		h.unlock(1, "k", "R2", 30*ms, 35*ms, evOK)
		h.grant(2, "k", "W", 3, 28*ms, 40*ms, ttl)
		expectOnly(t, h.check(t, defaultParams()))
	})
	t.Run("writer beside a reader", func(t *testing.T) {
		var h hb
		h.grantAs(0, "k", "R1", 1, 0, 5*ms, ttl, modeShared, "", 0, 0)
		h.grant(2, "k", "W", 2, 10*ms, 15*ms, ttl)
		expectOnly(t, h.check(t, defaultParams()), invS1, invS3)
	})
	t.Run("reader beside a writer", func(t *testing.T) {
		var h hb
		h.grant(2, "k", "W", 1, 0, 5*ms, ttl)
		h.grantAs(0, "k", "R1", 2, 10*ms, 15*ms, ttl, modeShared, "", 0, 0)
		expectOnly(t, h.check(t, defaultParams()), invS1, invS3)
	})
}

func TestModelReentrant(t *testing.T) {
	ttl := 1000 * ms
	t.Run("handles of one owner share the hold and its fence", func(t *testing.T) {
		var h hb
		h.grantAs(0, "k", "H1", 7, 0, 5*ms, ttl, modeExclusive, "reentrant:job", 0, 0)
		h.grantAs(1, "k", "H2", 7, 10*ms, 15*ms, ttl, modeExclusive, "reentrant:job", 0, 0)
		h.unlock(0, "k", "H1", 20*ms, 25*ms, evOK)
		h.unlock(1, "k", "H2", 30*ms, 35*ms, evOK)
		h.grant(2, "k", "W", 8, 32*ms, 40*ms, ttl)
		expectOnly(t, h.check(t, defaultParams()))
	})
	t.Run("an owner named like a holder's token is another owner", func(t *testing.T) {
		var h hb
		h.grant(0, "k", "tok", 1, 0, 5*ms, ttl)
		h.grantAs(1, "k", "H1", 1, 10*ms, 15*ms, ttl, modeExclusive, "reentrant:tok", 0, 0)
		expectOnly(t, h.check(t, defaultParams()), invS1, invS2, invS3)
	})
	t.Run("multi-key: one token on two keys", func(t *testing.T) {
		var h hb
		h.grant(0, "a", "M", 1, 0, 5*ms, ttl)
		h.grant(0, "b", "M", 1, 0, 5*ms, ttl)
		h.unlock(0, "a", "M", 20*ms, 25*ms, evOK)
		h.unlock(0, "b", "M", 20*ms, 25*ms, evOK)
		h.grant(1, "b", "N", 2, 10*ms, 30*ms, ttl)
		expectOnly(t, h.check(t, defaultParams()))
	})
}

// A reentrant handle the library declared lost at its deadline (Redis
// unreachable while its renewal was in flight) may still be live on the
// server: the renewal lands late, the release its Unlock tried is not
// sent. Its owner's next Lock then joins that hold, with its fence (S3
// must accept it). Another owner is still excluded until the lost
// handle's lease may have lapsed, and a later handle of the owner never
// gets the fence back once a new hold began.
func TestModelReentrantLostHandleHoldsUp(t *testing.T) {
	ttl := 400 * ms // drift 6ms: H1's deadline 394ms, its lease ends no sooner than 398ms
	lost := func(h *hb) {
		h.grantAs(0, "k", "H1", 7, 0, 10*ms, ttl, modeExclusive, "reentrant:job", 0, 0)
		h.op(event{Proc: 0, Kind: kindUnlock, Key: "k", Owner: "H1", Drift: 6 * ms}, 200*ms, 396*ms, evFail)
	}
	t.Run("the owner joins the hold its lost handle held up", func(t *testing.T) {
		var h hb
		lost(&h)
		h.grantAs(0, "k", "H2", 7, 397*ms, 420*ms, ttl, modeExclusive, "reentrant:job", 0, 0)
		h.unlock(0, "k", "H2", 430*ms, 435*ms, evOK)
		h.grant(1, "k", "W", 8, 400*ms, 900*ms, ttl) // after H1's lease (renewed late) ended
		expectOnly(t, h.check(t, defaultParams()))
	})
	t.Run("or the release ran: another owner at once", func(t *testing.T) {
		var h hb
		lost(&h)
		h.grant(1, "k", "W", 8, 300*ms, 310*ms, ttl)
		expectOnly(t, h.check(t, defaultParams()))
	})
	t.Run("not both", func(t *testing.T) {
		var h hb
		lost(&h)
		h.grant(1, "k", "W", 8, 300*ms, 310*ms, ttl)
		h.grantAs(0, "k", "H2", 7, 397*ms, 420*ms, ttl, modeExclusive, "reentrant:job", 0, 0)
		expectOnly(t, h.check(t, defaultParams()), invS1, invS2, invS3)
	})
	t.Run("a new hold ends the old one's fence", func(t *testing.T) {
		var h hb
		lost(&h)
		h.grantAs(0, "k", "H2", 9, 500*ms, 510*ms, ttl, modeExclusive, "reentrant:job", 0, 0)
		h.unlock(0, "k", "H2", 520*ms, 525*ms, evOK)
		h.grantAs(0, "k", "H3", 7, 530*ms, 540*ms, ttl, modeExclusive, "reentrant:job", 0, 0)
		expectOnly(t, h.check(t, defaultParams()), invS3)
	})
}

// Admin releases of a semaphore: the holders they released still believe
// they hold (their renewal or Unlock tells them later), which neither S1
// nor S3 counts; a grant above the callers' limit after the stored limit
// was removed (an admin release that took the permits in use for the
// limit) is caught by both.
func TestModelSemaphoreAdminRelease(t *testing.T) {
	ttl := 1000 * ms
	admin := func(h *hb, kind opKind, owner string, call, ret int64) {
		h.op(event{Proc: 9, Kind: kind, Key: "s", Owner: owner}, call, ret, evOK)
	}
	// Limit 2 at the callers; 3 holders under a stored limit of 3, which
	// is then removed.
	above := func(h *hb) {
		h.op(event{Proc: 8, Kind: kindSetLimit, Key: "s", Limit: 3}, 0, 1*ms, evOK)
		h.grantAs(0, "s", "A", 1, 2*ms, 5*ms, ttl, modeSemaphore, "", 2, 1)
		h.grantAs(1, "s", "B", 2, 6*ms, 8*ms, ttl, modeSemaphore, "", 2, 1)
		h.grantAs(2, "s", "C", 3, 9*ms, 11*ms, ttl, modeSemaphore, "", 2, 1)
		h.op(event{Proc: 8, Kind: kindSetLimit, Key: "s", Limit: 0}, 20*ms, 21*ms, evOK)
	}
	t.Run("a grant above the limit after ReleaseToken", func(t *testing.T) {
		var h hb
		above(&h)
		admin(&h, kindReleaseToken, "A", 30*ms, 31*ms)
		admin(&h, kindReleaseToken, "B", 32*ms, 33*ms)
		h.grantAs(3, "s", "W", 4, 40*ms, 45*ms, ttl, modeSemaphore, "", 2, 1)
		h.grantAs(4, "s", "X", 5, 41*ms, 46*ms, ttl, modeSemaphore, "", 2, 1) // C, W, X: 3 of 2
		expectOnly(t, h.check(t, defaultParams()), invS1, invS3)
	})
	t.Run("ReleaseToken makes room; its holder finds out later", func(t *testing.T) {
		var h hb
		above(&h)
		admin(&h, kindReleaseToken, "A", 30*ms, 31*ms)
		admin(&h, kindReleaseToken, "B", 32*ms, 33*ms)
		h.grantAs(3, "s", "W", 4, 25*ms, 45*ms, ttl, modeSemaphore, "", 2, 1)
		h.unlock(0, "s", "A", 50*ms, 52*ms, evOK) // the release's tombstone: nil
		h.op(event{Proc: 1, Kind: kindRenew, Key: "s", Owner: "B", Sent: 60 * ms, TTL: ttl}, 60*ms, 62*ms, evFail)
		expectOnly(t, h.check(t, defaultParams()))
	})
	t.Run("ForceRelease, a waiter confirming while it runs", func(t *testing.T) {
		var h hb
		h.grantAs(0, "s", "A", 1, 0, 5*ms, ttl, modeSemaphore, "", 2, 1)
		h.grantAs(1, "s", "B", 2, 6*ms, 8*ms, ttl, modeSemaphore, "", 2, 1)
		h.grantAs(3, "s", "W", 3, 15*ms, 35*ms, ttl, modeSemaphore, "", 2, 1) // handed at B's release
		h.unlock(1, "s", "B", 20*ms, 22*ms, evOK)
		admin(&h, kindForceRelease, "", 30*ms, 40*ms)
		h.grantAs(4, "s", "X", 4, 41*ms, 45*ms, ttl, modeSemaphore, "", 2, 1)
		h.grantAs(5, "s", "Y", 5, 42*ms, 46*ms, ttl, modeSemaphore, "", 2, 1)
		h.unlock(0, "s", "A", 50*ms, 52*ms, evFail) // force: a loss
		h.unlock(3, "s", "W", 55*ms, 57*ms, evFail)
		expectOnly(t, h.check(t, defaultParams()))
	})
	// ForceRelease releases a semaphore's holders one script each: here
	// V before X's grant, W (handed permits at M's release, confirming
	// with a fence after X's) after it, and neither X nor Y. No moment
	// holds more than 3; an atomic release cannot explain it.
	t.Run("ForceRelease meets its holders one by one", func(t *testing.T) {
		var h hb
		h.op(event{Proc: 8, Kind: kindSetLimit, Key: "s", Limit: 3}, 0, 1*ms, evOK)
		h.grantAs(0, "s", "V", 1, 2*ms, 5*ms, ttl, modeSemaphore, "", 2, 1)
		h.grantAs(1, "s", "M", 2, 6*ms, 8*ms, ttl, modeSemaphore, "", 2, 1)
		h.grantAs(2, "s", "W", 4, 10*ms, 38*ms, ttl, modeSemaphore, "", 2, 2) // handed at M's release
		h.unlock(1, "s", "M", 20*ms, 31*ms, evOK)
		admin(&h, kindForceRelease, "", 30*ms, 40*ms)
		h.grantAs(3, "s", "X", 3, 32*ms, 36*ms, ttl, modeSemaphore, "", 2, 1)
		h.grantAs(4, "s", "Y", 5, 37*ms, 39*ms, ttl, modeSemaphore, "", 2, 2)
		h.unlock(0, "s", "V", 41*ms, 43*ms, evFail)
		h.unlock(2, "s", "W", 44*ms, 46*ms, evFail)
		h.unlock(3, "s", "X", 41*ms, 45*ms, evOK)
		h.unlock(4, "s", "Y", 46*ms, 48*ms, evOK)
		expectOnly(t, h.check(t, defaultParams()))
	})
	// A holder whose grant's reply came after ForceRelease took its
	// permits, and whose Unlock's reply came after its deadline: the
	// permits were others' by then, so its Unlock reports the loss; one
	// that answered released is caught (S3 only: the admin release ended
	// the holder's believed hold before it began).
	forcedLate := func(h *hb, unlock eventType) {
		ttl := 400 * ms
		h.op(event{Proc: 8, Kind: kindSetLimit, Key: "s", Limit: 3}, 0, 1*ms, evOK)
		h.grantAs(0, "s", "V", 1, 2*ms, 100*ms, ttl, modeSemaphore, "", 2, 2) // reply late
		admin(h, kindForceRelease, "", 10*ms, 20*ms)
		h.grantAs(1, "s", "X", 2, 25*ms, 30*ms, ttl, modeSemaphore, "", 2, 2)
		h.grantAs(2, "s", "Y", 3, 26*ms, 31*ms, ttl, modeSemaphore, "", 2, 1)
		h.unlock(0, "s", "V", 100*ms, 500*ms, unlock) // past V's deadline
	}
	t.Run("ForceRelease before the grant's reply, Unlock past the deadline: a loss", func(t *testing.T) {
		var h hb
		forcedLate(&h, evFail)
		expectOnly(t, h.check(t, defaultParams()))
	})
	t.Run("ForceRelease before the grant's reply, Unlock past the deadline: released", func(t *testing.T) {
		var h hb
		forcedLate(&h, evOK)
		expectOnly(t, h.check(t, defaultParams()), invS3)
	})
	t.Run("a grant above the limit after ForceRelease", func(t *testing.T) {
		var h hb
		above(&h)
		admin(&h, kindForceRelease, "", 30*ms, 40*ms)
		h.grantAs(4, "s", "X", 5, 41*ms, 45*ms, ttl, modeSemaphore, "", 2, 1)
		h.grantAs(5, "s", "Y", 6, 42*ms, 46*ms, ttl, modeSemaphore, "", 2, 1)
		h.grantAs(6, "s", "Z", 7, 43*ms, 47*ms, ttl, modeSemaphore, "", 2, 1)
		expectOnly(t, h.check(t, defaultParams()), invS1, invS3)
	})
}
