package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// A shared or reentrant hold that ForceRelease took stays lost for its old
// handles when its owner (or a reader) starts a new hold on the key: the
// steal empties the hold set, so an old handle is neither renewed nor
// released as if it had joined the new hold. Its Extend and Unlock report
// the loss; the new hold is left alone.
func TestForceReleasedHoldStaysLostAfterANewHold(t *testing.T) {
	ttl := dlock.WithTTL(10 * time.Second)
	for name, take := range map[string]func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error){
		"reentrant": func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.Reentrant(k).TryLock(t.Context(), "o", ttl, dlock.WithoutRenewal())
		},
		"read": func(t *testing.T, c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.RWLock(k).TryRLock(t.Context(), ttl, dlock.WithoutRenewal())
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := newClient(t, dlock.Options{})
			k := key(t)
			old, err := take(t, c, k)
			if err != nil || old == nil {
				t.Fatalf("first hold: %v, %v", old, err)
			}
			if ok, err := adminOf(t, c).ForceRelease(t.Context(), k); !ok || err != nil {
				t.Fatalf("ForceRelease = %v, %v", ok, err)
			}
			fresh, err := take(t, c, k)
			if err != nil || fresh == nil {
				t.Fatalf("the hold after the steal: %v, %v", fresh, err)
			}
			if err := old.Extend(t.Context(), 10*time.Second); !errors.Is(err, dlock.ErrLost) {
				t.Errorf("Extend of the stolen handle = %v, want the loss", err)
			}
			if err := old.Unlock(t.Context()); !errors.Is(err, dlock.ErrLost) {
				t.Errorf("Unlock of the stolen handle = %v, want the loss (ErrLost)", err)
			}
			if err := fresh.Extend(t.Context(), 10*time.Second); err != nil {
				t.Errorf("Extend of the new hold = %v", err)
			}
			if err := fresh.Unlock(t.Context()); err != nil {
				t.Errorf("Unlock of the new hold = %v", err)
			}
		})
	}
}
