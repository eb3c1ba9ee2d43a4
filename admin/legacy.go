// legacy.go owns the release of a legacy lock (a decimal timestamp) by
// its value.

package admin

import (
	"strconv"
	"time"

	"github.com/dlock-go/dlock/internal/legacyrelease"
	"github.com/dlock-go/dlock/protocol"
)

// legacyRelease deletes a legacy lock's key if it holds value, as the
// legacy protocol's own release does: at most once, because value is not
// unique to one holder (a re-send of a release that ran must not delete
// another client that took the key since with the same timestamp).
func legacyRelease(ks protocol.Keys, value string) protocol.Call {
	return legacyrelease.Call(ks, value, legacyLeft(value, time.Now()))
}

// legacyLeft is how long until the legacy timestamp value has passed: a
// value beyond 1e11 is in milliseconds, else in seconds (as Inspect's
// callers read it). Clients take the lock over one unit after it.
func legacyLeft(value string, now time.Time) time.Duration {
	n, err := strconv.ParseInt(value, 10, 64)
	switch {
	case err != nil:
		return 0
	case n > 1e11:
		return time.UnixMilli(n + 1).Sub(now)
	}
	return time.Unix(n+1, 0).Sub(now)
}
