package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Bulk renewals of locks with different TTLs (separate groups), some of
// whose keys are turned into another type, deleted or stolen while held:
// each of those is lost with its own cause, no later than its deadline,
// and every other lock stays held.
func TestBulkRenewalMixedFates(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	ctx := t.Context()
	r := srv.Client(t)
	a := holdMany(t, c, key(t), 40, dlock.WithTTL(600*time.Millisecond))
	b := holdMany(t, c, key(t), 40, dlock.WithTTL(900*time.Millisecond))
	all := append(append([]*dlock.Lock{}, a...), b...)
	fates := map[*dlock.Lock]error{}
	for i, lk := range all {
		var err error
		switch i % 10 {
		case 3:
			r.Del(ctx, lk.Key())
			r.HSet(ctx, lk.Key(), "f", "v")
			err = dlock.ErrWrongType
		case 5:
			r.Del(ctx, lk.Key())
			err = dlock.ErrExpired
		case 7:
			r.Set(ctx, lk.Key(), "someone else", 0)
			err = dlock.ErrTaken
		default:
			continue
		}
		fates[lk] = err
	}
	time.Sleep(2 * time.Second)
	for i, lk := range all {
		want := fates[lk]
		got := lk.Err()
		switch {
		case want == nil && got != nil:
			t.Errorf("lock %d: lost: %v", i, got)
		case want != nil && !errors.Is(got, want):
			t.Errorf("lock %d: Err = %v, want %v", i, got, want)
		case want != nil:
			select {
			case <-lk.Done():
			default:
				t.Errorf("lock %d: Err %v but Done open", i, got)
			}
		}
	}
	if s := c.Stats(); s.Lost != uint64(len(fates)) {
		t.Errorf("Stats.Lost = %d, want %d", s.Lost, len(fates))
	}
	for _, lk := range all {
		if err := lk.Unlock(ctx); fates[lk] == nil && err != nil {
			t.Errorf("Unlock: %v", err)
		}
		if k := lk.Key(); fates[lk] != nil {
			r.Del(ctx, k)
		}
	}
}
