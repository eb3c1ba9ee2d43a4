package dlock_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/redis/go-redis/v9"
)

// limitOf returns the limit SetLimit stored for semaphore k ("" if none).
func limitOf(t *testing.T, rdb *redis.Client, c *dlock.Client, k string) string {
	t.Helper()
	ks := adminOf(t, c).KeysFor(k)
	v, err := rdb.Get(t.Context(), strings.TrimSuffix(ks.Fence, ":fence")+":limit").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return v
}

// A SetLimit whose caller saw an ambiguous error and whose command reaches
// Redis only after the caller's next SetLimit applied changes nothing: the
// newer limit stays (a late 4 does not raise it back, a late 0 does not
// delete it).
func TestSetLimitLateKeepsNewer(t *testing.T) {
	for _, late := range []int{4, 0} {
		t.Run(map[int]string{4: "raise", 0: "remove"}[late], func(t *testing.T) {
			ctx := t.Context()
			c, inj := faultyClient(t, dlock.Options{})
			_, rdb := newClient(t, dlock.Options{})
			k := key(t)
			sem := c.Semaphore(k, 5)
			if err := sem.SetLimit(ctx, 3); err != nil {
				t.Fatal(err)
			}
			inj.Add(faultcmd.Rule{Name: "SetLimit lands after the next one", Action: faultcmd.Late,
				Match: faultcmd.Match{Script: "semaphore_limit", Key: k}, Until: faultcmd.Match{Script: "semaphore_limit", Key: k}})
			if err := sem.SetLimit(ctx, late); !errors.Is(err, dlock.ErrUnavailable) {
				t.Fatalf("SetLimit(%d) with its command late = %v, want ErrUnavailable", late, err)
			}
			if err := sem.SetLimit(ctx, 2); err != nil {
				t.Fatalf("SetLimit(2): %v", err)
			}
			waitLate(t, inj)
			if got := limitOf(t, rdb, c, k); got != "2" {
				t.Fatalf("after SetLimit(%d) landed late behind SetLimit(2), the stored limit is %q, want \"2\"", late, got)
			}
			if err := sem.SetLimit(ctx, 1); err != nil {
				t.Fatalf("SetLimit(1) after the late one: %v", err)
			}
			if got := limitOf(t, rdb, c, k); got != "1" {
				t.Fatalf("SetLimit(1) after the late one stored %q", got)
			}
		})
	}
}

// A SetLimit whose reply was lost (it ran) and that the caller retries with
// the same limit ends with that limit, and later calls still apply.
func TestSetLimitRetriedAfterLostReply(t *testing.T) {
	ctx := t.Context()
	c, inj := faultyClient(t, dlock.Options{})
	_, rdb := newClient(t, dlock.Options{})
	k := key(t)
	sem := c.Semaphore(k, 5)
	if err := sem.SetLimit(ctx, 3); err != nil {
		t.Fatal(err)
	}
	inj.Add(faultcmd.Rule{Name: "SetLimit's reply lost", Action: faultcmd.DropReply,
		Match: faultcmd.Match{Script: "semaphore_limit", Key: k}})
	if err := sem.SetLimit(ctx, 4); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("SetLimit(4) with its reply lost = %v, want ErrUnavailable", err)
	}
	if err := sem.SetLimit(ctx, 4); err != nil {
		t.Fatalf("SetLimit(4) retried: %v", err)
	}
	if got := limitOf(t, rdb, c, k); got != "4" {
		t.Fatalf("after the retried SetLimit(4) the stored limit is %q, want \"4\"", got)
	}
	if err := sem.SetLimit(ctx, 0); err != nil {
		t.Fatalf("SetLimit(0): %v", err)
	}
	if got := limitOf(t, rdb, c, k); got != "" {
		t.Fatalf("after SetLimit(0) the stored limit is %q, want none", got)
	}
}
