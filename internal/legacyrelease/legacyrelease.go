// Package legacyrelease is the release of a legacy (SETNX/GETSET
// timestamp) lock, shared by package dlock/legacy (a holder's Unlock) and
// package dlock (Client.ReleaseToken on a legacy key), which cannot import
// dlock/legacy.
//
// The lock's value is not unique (every client locking in the same unit
// with the same timeout writes the same timestamp), so a release runs at
// most once: it carries a random id of its own, and its first run leaves
// a tombstone under that id (scripts/release.lua).
package legacyrelease

import (
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"time"

	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/dlock-go/dlock/protocol"
)

var (
	//go:embed scripts/release.lua
	releaseSrc string

	// Script is release.lua.
	Script = lualib.Script(releaseSrc)
)

// TombMin is the least time a release's tombstone lives: longer than the
// Redis client's re-sends of it take.
const TombMin = 10 * time.Second

// TombMax bounds the tombstone of a value far in the future.
const TombMax = 24 * time.Hour

// Call is the release of k if it holds value, under a new random id. left
// is how long until value has passed (when no client trusts a lock holding
// it any more); the tombstone lives that long, at most TombMax, plus
// TombMin for clocks that differ.
func Call(k protocol.Keys, value string, left time.Duration) protocol.Call {
	tomb := min(max(left, 0), TombMax) + TombMin
	return protocol.Call{Script: Script, Keys: []string{k.Lock, k.Queue + ":" + ID()},
		Args: []any{value, k.Wake, tomb.Milliseconds()}}
}

// ID returns 128 random bits, base64url-encoded: the id of a release or a
// takeover.
func ID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}
