package dlock

import (
	"encoding/hex"
	"github.com/dlock-go/dlock/internal/keyspace"
	"testing"

	"github.com/dlock-go/dlock/internal/notify"
)

// A liveness probe's payload is never taken for a hand-off: it is neither
// a hex hand-off ID nor a token, whatever its sequence number.
func TestProbePayloadIsNoHandoff(t *testing.T) {
	for _, seq := range []string{"0", "1", "18446744073709551615", "0123456789abcdef0123456789abcdef01"} {
		p := notify.ProbePrefix + seq
		if _, err := hex.DecodeString(p); keyspace.IsToken(p) || err == nil {
			t.Fatalf("probe payload %q could name a waiter", p)
		}
	}
}
