package dlockotel

import "github.com/dlock-go/dlock"

// Chain returns Hooks that call the hooks of each of hooks in turn, in the
// order given, skipping nil ones; a field is nil if all of its hooks are.
// Use it to install the Telemetry's hooks next to your own, or next to
// another adapter's:
//
//	dlock.Options{Hooks: dlockotel.Chain(tel.Hooks(), myHooks)}
//
// Every hook still runs synchronously in the goroutine that did the work,
// so the cost of the chain is the sum of its parts.
func Chain(hooks ...dlock.Hooks) dlock.Hooks { return dlock.ChainHooks(hooks...) }
