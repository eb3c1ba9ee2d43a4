package dlock

import "context"

// SplitSlots makes c group the keys of a multi-key lock by Cluster slot,
// as on a Cluster, so tests on one server exercise the cross-slot path.
func SplitSlots(c *Client) { c.splitSlots = true }

// ElectionNames returns the names of e's leader history and channel.
func ElectionNames(e *Election) (history, channel string) { return e.history, e.channel }

// RepublishForTest sends l's current publication again, as a Redis client
// re-sending it after a lost reply would.
func RepublishForTest(ctx context.Context, l *Leadership) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.publishLocked(ctx)
	return err
}
