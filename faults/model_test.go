package faults

import "testing"

// The extended model and S1 on hand-made histories of semaphores, read
// locks and reentrant holds: what each primitive allows passes, one
// holder too many is caught by both S1 and S3.

func (h *hb) grantAs(proc int, key, owner string, fence uint64, call, ret, ttl int64, mode, group string, limit, permits int) {
	drift := ttl/100 + 2*ms
	h.op(Event{Proc: proc, Kind: KLock, Key: key, Fence: fence, Owner: owner, Sent: call, TTL: ttl, Drift: drift,
		Deadline: call + ttl - drift, Mode: mode, Group: group, Limit: limit, Permits: permits}, call, ret, OK)
}

func TestModelSemaphore(t *testing.T) {
	ttl := 1000 * ms
	t.Run("within the limit", func(t *testing.T) {
		var h hb
		h.grantAs(0, "s", "A", 1, 0, 5*ms, ttl, ModeSemaphore, "", 2, 1)
		h.grantAs(1, "s", "B", 2, 10*ms, 15*ms, ttl, ModeSemaphore, "", 2, 1)
		h.unlock(0, "s", "A", 20*ms, 25*ms, OK)
		h.grantAs(2, "s", "C", 3, 30*ms, 35*ms, ttl, ModeSemaphore, "", 2, 1)
		expectOnly(t, h.check(t, DefaultParams()))
	})
	t.Run("one over", func(t *testing.T) {
		var h hb
		h.grantAs(0, "s", "A", 1, 0, 5*ms, ttl, ModeSemaphore, "", 2, 1)
		h.grantAs(1, "s", "B", 2, 10*ms, 15*ms, ttl, ModeSemaphore, "", 2, 1)
		h.grantAs(2, "s", "C", 3, 30*ms, 35*ms, ttl, ModeSemaphore, "", 2, 1)
		expectOnly(t, h.check(t, DefaultParams()), S1, S3)
	})
	t.Run("permits count", func(t *testing.T) {
		var h hb
		h.grantAs(0, "s", "A", 1, 0, 5*ms, ttl, ModeSemaphore, "", 3, 2)
		h.grantAs(1, "s", "B", 2, 10*ms, 15*ms, ttl, ModeSemaphore, "", 3, 2)
		expectOnly(t, h.check(t, DefaultParams()), S1, S3)
	})
	t.Run("a lapsed holder makes room", func(t *testing.T) {
		var h hb
		h.grantAs(0, "s", "A", 1, 0, 5*ms, 100*ms, ModeSemaphore, "", 1, 1)
		h.grantAs(1, "s", "B", 2, 50*ms, 150*ms, ttl, ModeSemaphore, "", 1, 1)
		expectOnly(t, h.check(t, DefaultParams()))
	})
	t.Run("SetLimit cut", func(t *testing.T) {
		var h hb
		h.op(Event{Proc: 9, Kind: KSetLimit, Key: "s", Limit: 1}, 0, 1*ms, OK)
		h.grantAs(0, "s", "A", 1, 2*ms, 5*ms, ttl, ModeSemaphore, "", 3, 1)
		h.grantAs(1, "s", "B", 2, 10*ms, 15*ms, ttl, ModeSemaphore, "", 3, 1)
		// S1 trusts only raises (the largest limit that may be in force):
		// S3 knows the stored limit.
		expectOnly(t, h.check(t, DefaultParams()), S3)
	})
}

func TestModelShared(t *testing.T) {
	ttl := 1000 * ms
	t.Run("readers together, then a writer", func(t *testing.T) {
		var h hb
		h.grantAs(0, "k", "R1", 1, 0, 5*ms, ttl, ModeShared, "", 0, 0)
		h.grantAs(1, "k", "R2", 2, 10*ms, 15*ms, ttl, ModeShared, "", 0, 0)
		h.unlock(0, "k", "R1", 20*ms, 25*ms, OK)
		h.unlock(1, "k", "R2", 30*ms, 35*ms, OK)
		h.grant(2, "k", "W", 3, 28*ms, 40*ms, ttl)
		expectOnly(t, h.check(t, DefaultParams()))
	})
	t.Run("writer beside a reader", func(t *testing.T) {
		var h hb
		h.grantAs(0, "k", "R1", 1, 0, 5*ms, ttl, ModeShared, "", 0, 0)
		h.grant(2, "k", "W", 2, 10*ms, 15*ms, ttl)
		expectOnly(t, h.check(t, DefaultParams()), S1, S3)
	})
	t.Run("reader beside a writer", func(t *testing.T) {
		var h hb
		h.grant(2, "k", "W", 1, 0, 5*ms, ttl)
		h.grantAs(0, "k", "R1", 2, 10*ms, 15*ms, ttl, ModeShared, "", 0, 0)
		expectOnly(t, h.check(t, DefaultParams()), S1, S3)
	})
}

func TestModelReentrant(t *testing.T) {
	ttl := 1000 * ms
	t.Run("handles of one owner share the hold and its fence", func(t *testing.T) {
		var h hb
		h.grantAs(0, "k", "H1", 7, 0, 5*ms, ttl, ModeExclusive, "reentrant:job", 0, 0)
		h.grantAs(1, "k", "H2", 7, 10*ms, 15*ms, ttl, ModeExclusive, "reentrant:job", 0, 0)
		h.unlock(0, "k", "H1", 20*ms, 25*ms, OK)
		h.unlock(1, "k", "H2", 30*ms, 35*ms, OK)
		h.grant(2, "k", "W", 8, 32*ms, 40*ms, ttl)
		expectOnly(t, h.check(t, DefaultParams()))
	})
	t.Run("an owner named like a holder's token is another owner", func(t *testing.T) {
		var h hb
		h.grant(0, "k", "tok", 1, 0, 5*ms, ttl)
		h.grantAs(1, "k", "H1", 1, 10*ms, 15*ms, ttl, ModeExclusive, "reentrant:tok", 0, 0)
		expectOnly(t, h.check(t, DefaultParams()), S1, S2, S3)
	})
	t.Run("multi-key: one token on two keys", func(t *testing.T) {
		var h hb
		h.grant(0, "a", "M", 1, 0, 5*ms, ttl)
		h.grant(0, "b", "M", 1, 0, 5*ms, ttl)
		h.unlock(0, "a", "M", 20*ms, 25*ms, OK)
		h.unlock(0, "b", "M", 20*ms, 25*ms, OK)
		h.grant(1, "b", "N", 2, 10*ms, 30*ms, ttl)
		expectOnly(t, h.check(t, DefaultParams()))
	})
}
