package faults

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// Probes of fixes a scenario depends on. Each runs against the resource's
// server (never faulted) on keys of its own, and returns "" when the fix is
// in this build, else what is missing. They let a scenario that finds a
// defect land before the defect's fix: until then the row shows the
// violations as pending (DLOCK_FAULTS_STRICT=1 fails on them anyway).

func probeClient(t *testing.T) (*dlock.Client, *redis.Client, func()) {
	rdb := redis.NewClient(&redis.Options{Addr: resSrv.Addr(), ContextTimeoutEnabled: true})
	c, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, rdb, func() { _ = c.Close(); _ = rdb.Close() }
}

// pendingAll joins probes.
func pendingAll(ps ...func(t *testing.T) string) func(t *testing.T) string {
	return func(t *testing.T) string {
		var why []string
		for _, p := range ps {
			if w := p(t); w != "" {
				why = append(why, w)
			}
		}
		return strings.Join(why, "; ")
	}
}

// pendingReservedNames: a lock key that is another lock's auxiliary name,
// and a prefix that aliases, are refused.
func pendingReservedNames(t *testing.T) string {
	c, rdb, done := probeClient(t)
	defer done()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var why []string
	lk, err := c.TryLock(ctx, "dlock:{fk-probe}:q")
	if lk != nil {
		_ = lk.Unlock(ctx)
	}
	if !errors.Is(err, dlock.ErrInvalidArgument) {
		why = append(why, "reserved auxiliary names not refused")
	}
	if p, err := dlock.New(rdb, dlock.Options{Prefix: "dlock:#x"}); err == nil {
		_ = p.Close()
		why = append(why, "aliasing prefixes not refused")
	}
	return strings.Join(why, ", ")
}

// pendingReentrantIdentity: a reentrant owner named after a plain
// holder's token does not join its lock.
func pendingReentrantIdentity(t *testing.T) string {
	c, _, done := probeClient(t)
	defer done()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	k := "fk-probe:reentrant:" + t.Name()
	lk, err := c.TryLock(ctx, k)
	if err != nil {
		return ""
	}
	defer func() { _ = lk.Unlock(context.WithoutCancel(ctx)) }()
	r, err := c.TryLock(ctx, k, dlock.Reentrant(lk.Token()))
	if err == nil {
		_ = r.Unlock(ctx)
		return "a reentrant owner equal to a token joins its lock"
	}
	return ""
}
