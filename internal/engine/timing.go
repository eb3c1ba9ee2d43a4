package engine

import (
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// MaxTTL is the longest lock TTL accepted.
const MaxTTL = 365 * 24 * time.Hour

// Timing is how a Client times its leases: the drift allowance
// (TTL*DriftFactor + MinDrift) subtracted from every validity, and the
// renewal interval (RenewInterval, 0: a third of each lease's TTL).
type Timing struct {
	DriftFactor   float64
	MinDrift      time.Duration
	RenewInterval time.Duration
}

// TTLWorks reports whether a lock with ttl can live: its validity (TTL
// minus the drift allowance) is positive and, if renewed, longer than the
// renewal interval, so a renewal lands before the deadline.
func (t Timing) TTLWorks(ttl time.Duration, renew bool) bool {
	if ttl < time.Millisecond || ttl > MaxTTL {
		return false
	}
	validity := ttl - t.Drift(ttl)
	return validity > 0 && (!renew || t.RenewEvery(ttl) < validity)
}

// TTLError is the ErrInvalidTTL for ttl: it names ttl and the range of
// TTLs that work with t.
func (t Timing) TTLError(ttl time.Duration, renew bool) error {
	lo, hi := time.Duration(1), MaxTTL
	if !t.TTLWorks(hi, renew) {
		return &errs.TTLError{TTL: ttl, Renew: renew}
	}
	for lo < hi { // the shortest TTL that works (TTLWorks is monotonic)
		mid := lo + (hi-lo)/2
		if t.TTLWorks(mid, renew) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return &errs.TTLError{TTL: ttl, Min: max(lo, time.Millisecond), Max: MaxTTL, Renew: renew}
}

// Drift is the allowance subtracted from a validity of ttl.
func (t Timing) Drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*t.DriftFactor) + t.MinDrift
}

// RenewEvery is how often a lock with this ttl is renewed.
func (t Timing) RenewEvery(ttl time.Duration) time.Duration {
	if t.RenewInterval > 0 && t.RenewInterval < ttl/2 {
		return t.RenewInterval
	}
	if t.RenewInterval > 0 {
		return ttl / 2
	}
	return ttl / 3
}

// FenceTTL is how long the fence counter outlives a grant. The counter may
// expire after that: the next grant then starts from the server's TIME in
// microseconds, which by then is above every fence handed out before.
func FenceTTL(ttl time.Duration) time.Duration { return ttl + 10*time.Second }
