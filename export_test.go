package dlock

// SplitSlots makes c group the keys of a multi-key lock by Cluster slot,
// as on a Cluster, so tests on one server exercise the cross-slot path.
func SplitSlots(c *Client) { c.splitSlots = true }
