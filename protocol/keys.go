package protocol

// Keys names the Redis keys of one lock. The engine derives them from the
// lock key and the Client's prefix (docs/keys.md in the dlock repository lists them);
// a protocol uses those it needs.
type Keys struct {
	Lock  string // the lock key, exactly as the caller gave it
	Fence string // the fencing counter, in Lock's Cluster slot
	Wake  string // the wake-up channel for waiters that do not queue
	Queue string // the FIFO wait queue: waiter tokens, oldest first
	// Waiters holds the queued waiters' leases (a hash), and Tombs the
	// tokens that left the queue or released for good (a sorted set);
	// both in Lock's Cluster slot. Every script that reads or writes the
	// queue is given all three.
	Waiters, Tombs string
}
