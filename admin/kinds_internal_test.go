package admin

import (
	"testing"

	"github.com/dlock-go/dlock/internal/keyspace"
)

// Every kind internal/keyspace decodes is one of the AuxKind constants,
// with the same name: AuxKeyOf converts one to the other.
func TestAuxKindsMatchKeyspace(t *testing.T) {
	public := map[AuxKind]bool{}
	for _, k := range []AuxKind{AuxFence, AuxQueue, AuxWaiters, AuxTombs, AuxOp, AuxWake, AuxReaders, AuxHolds, AuxPermits,
		AuxLimit, AuxLimitVer, AuxCount, AuxSegments, AuxGuard, AuxLeader, AuxElected} {
		public[k] = true
	}
	inner := []keyspace.AuxKind{keyspace.AuxOp}
	for _, a := range keyspace.Table {
		inner = append(inner, a.Kind)
	}
	if len(inner) != len(public) {
		t.Errorf("keyspace has %d kinds, package admin %d", len(inner), len(public))
	}
	for _, k := range inner {
		if !public[AuxKind(k)] {
			t.Errorf("keyspace kind %q has no AuxKind constant", k)
		}
	}
}
