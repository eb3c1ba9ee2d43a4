package protocol

import "time"

// Grant is the outcome of one Protocol.Acquire attempt.
type Grant struct {
	Acquired  bool
	Value     string        // what the key holds for the caller
	Fence     uint64        // the grant's fencing token (0: the protocol has none)
	HolderTTL time.Duration // if not acquired: the holder's remaining TTL, negative if unknown
}
