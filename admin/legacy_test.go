package admin_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/legacy"
)

// A legacy value is now+timeout+1, the same for every client locking in
// the same second with the same timeout. A ReleaseToken of a legacy lock
// whose command the Redis client re-sends (after a broken connection lost
// the reply) lands after another client took the key in the same second,
// with the same value: it must leave that client's lock alone. Before,
// ReleaseToken ran the token lock's release, which deletes the key
// whenever it holds the token, and a third client got in beside the
// newcomer.
func TestResentLegacyReleaseTokenKeepsNewcomer(t *testing.T) {
	ctx := t.Context()
	t0 := time.Now().Truncate(time.Second)
	p := legacy.New(legacy.Options{Unit: legacy.Seconds, Clock: func() time.Time { return t0 }})
	opts := []dlock.LockOption{dlock.WithProtocol(p), dlock.WithTTL(time.Minute), dlock.WithoutRenewal()}
	_, adm, inj := faultyClient(t, dlock.Options{})
	a, _, rdb := newClient(t, dlock.Options{})
	b, _, _ := newClient(t, dlock.Options{})
	k := key(t)
	lkA, err := a.TryLock(ctx, k, opts...)
	if err != nil {
		t.Fatal(err)
	}
	inj.Add(faultcmd.Rule{Name: "the release", Action: faultcmd.Observe, Times: -1,
		Match: faultcmd.Match{Key: k, Func: func(c faultcmd.Command) bool { return c.Name == "evalsha" || c.Name == "eval" }}})
	if err := adm.ReleaseToken(ctx, k, lkA.Token()); err != nil {
		t.Fatalf("ReleaseToken of A's legacy lock: %v", err)
	}
	var sent []any // the release as sent (the last copy: EVAL after NOSCRIPT)
	for _, e := range inj.Log() {
		if e.Action == faultcmd.Observe {
			sent = e.Command.Args
		}
	}
	if sent == nil {
		t.Fatal("no release script call observed")
	}

	lkB, err := b.TryLock(ctx, k, opts...)
	if err != nil {
		t.Fatalf("B's TryLock after the release: %v", err)
	}
	if lkB.Token() != lkA.Token() {
		t.Fatalf("B holds %q, A held %q: the test needs the same value", lkB.Token(), lkA.Token())
	}
	if err := rdb.Do(ctx, sent...).Err(); err != nil {
		t.Fatalf("the release re-sent: %v", err)
	}
	if got := rdb.Get(ctx, k).Val(); got != lkB.Token() {
		t.Fatalf("after the re-sent release the key holds %q, want B's %q", got, lkB.Token())
	}
	if err := lkB.Unlock(ctx); err != nil {
		t.Fatalf("B's Unlock: %v", err)
	}
}
