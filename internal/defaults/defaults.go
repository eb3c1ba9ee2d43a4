// Package defaults owns the default values of dlock's options: the one
// place each is written, for package dlock (Options), package admin, the
// key names (the prefix fenced's guard records always use), package
// redlock and the dlock command. Package dlock documents each default next
// to its Options field, and Client.Options returns the values in effect.
package defaults

import "time"

// The defaults of dlock.Options' fields of the same names.
const (
	Prefix         = "dlock"
	TTL            = 10 * time.Second
	DriftFactor    = 0.01
	MinDrift       = 2 * time.Millisecond
	RetryInterval  = time.Second
	ReleaseTimeout = 5 * time.Second
	// ReleaseResendWindow covers the second or so a Sentinel client takes
	// to hear of a failover, with room for a loaded machine.
	ReleaseResendWindow = 5 * time.Second
	PickupTimeout       = time.Second
	WaiterLease         = 3 * time.Second
	ReplicaTimeout      = 100 * time.Millisecond
)
