package admin

import (
	"strings"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/keyspace"
)

// AuxKind names one kind of auxiliary key or channel dlock derives from a
// lock key (docs/keys.md lists them).
type AuxKind string

// The kinds of auxiliary names, one per suffix, plus AuxOp.
const (
	AuxFence    AuxKind = "fence"    // <P>:{K}:fence
	AuxQueue    AuxKind = "queue"    // <P>:{K}:q
	AuxWaiters  AuxKind = "waiters"  // <P>:{K}:waiters, the queued waiters' leases
	AuxTombs    AuxKind = "tombs"    // <P>:{K}:tombs, the tombstones of tokens that left the queue or released
	AuxOp       AuxKind = "op"       // <P>:{K}:q:<id>, the record of one Counter operation or legacy release
	AuxWake     AuxKind = "wake"     // <P>:{K}:wake (a pub/sub channel)
	AuxReaders  AuxKind = "readers"  // <P>:{K}:readers
	AuxHolds    AuxKind = "holds"    // <P>:{K}:holds
	AuxPermits  AuxKind = "permits"  // <P>:{K}:permits
	AuxLimit    AuxKind = "limit"    // <P>:{K}:limit
	AuxLimitVer AuxKind = "limitver" // <P>:{K}:limitver, the version of a semaphore's limit
	AuxCount    AuxKind = "count"    // <P>:{K}:count
	AuxSegments AuxKind = "segments" // <P>:{K}:segments, a Counter's segment count
	AuxGuard    AuxKind = "guard"    // dlock:{K}:guard (package fenced, always the default prefix)
	AuxLeader   AuxKind = "leader"   // <P>:{K}:leader, an election's leader history
	AuxElected  AuxKind = "elected"  // <P>:{K}:elected (a pub/sub channel)
)

// Slot returns the Redis Cluster hash slot (0..16383) of key, honouring
// hash tags as Redis does. A lock key's auxiliary keys are in its slot.
func Slot(key string) int { return keyspace.Slot(key) }

// ReentrantOwner decodes a lock key's value: the owner id of the reentrant
// hold it names (the value starts with ReentrantPrefix), and whether it
// names one.
func ReentrantOwner(value string) (owner string, ok bool) {
	return strings.CutPrefix(value, ReentrantPrefix)
}

// What a lock key holds besides a holder's token (22 base64url
// characters) or a legacy timestamp (digits).
const (
	// SharedValue is what a read-locked key holds (dlock.RWLock's
	// readers), with the longest reader's TTL. It cannot be a reentrant
	// owner.
	SharedValue = keyspace.SharedValue
	// ReentrantPrefix starts what the key of a reentrant hold holds
	// (dlock.Reentrant): the prefix, then the owner id.
	ReentrantPrefix = keyspace.ReentrantPrefix
)

// ErrEmptyToken: ReleaseToken was given an empty token. It matches
// dlock.ErrInvalidArgument.
var ErrEmptyToken = errs.Arg("empty token")
