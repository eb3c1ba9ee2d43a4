package dlock

import "context"

// The eviction-policy check itself (the verdict, when it is read again,
// what is logged) is internal/evictpolicy's Gate, one per Client.

// CheckServers reads the maxmemory-policy of every master the Client
// writes to (each Cluster master, each Ring shard) and returns
// ErrEvictionPolicy, wrapped with the servers and their policies, if one
// may evict keys and Options.AllowEviction is not set. Call it after New
// to refuse such a server at start-up: otherwise the first acquire makes
// the same check. A master that does not answer makes it return
// ErrUnavailable. A policy a server refuses to tell (CONFIG GET and INFO
// both denied) is logged at WARN, not returned.
func (c *Client) CheckServers(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	return c.evict.CheckNow(ctx)
}
