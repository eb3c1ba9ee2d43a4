package dlock_test

import (
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestKeysPerLock: 200 Lock/Unlock pairs on one key leave a bounded
// handful of keys (the fence counter and the tombstones of the released
// tokens, one sorted set), not one per pair. Before, each release left a
// tombstone key of its own for 10 s: 201 keys.
func TestKeysPerLock(t *testing.T) {
	ctx := t.Context()
	s := redistest.Start(t, redistest.Config{})
	c, rdb := newClientOn(t, s.NewClient(), dlock.Options{})
	for range 200 {
		lk, err := c.Lock(ctx, "pairs")
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 3 {
		t.Fatalf("200 pairs on one key left %d keys, among them %q", len(keys), keys[:10])
	}
	if n := rdb.ZCard(ctx, adminOf(t, c).KeysFor("pairs").Tombs).Val(); n < 1 {
		t.Fatalf("the released tokens left %d tombstones", n)
	}
}
