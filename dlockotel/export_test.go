package dlockotel

// Pending returns how many keys the correlator still tracks: pending
// acquires, pending releases and held locks. After every wrapper call has
// returned and every lock is released or lost, all are 0.
func Pending(t *Telemetry) (acq, rel, held int) {
	t.corr.mu.Lock()
	defer t.corr.mu.Unlock()
	return len(t.corr.acq), len(t.corr.rel), len(t.corr.held)
}
