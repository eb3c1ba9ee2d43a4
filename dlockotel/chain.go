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
func Chain(hooks ...dlock.Hooks) dlock.Hooks {
	var acq []func(dlock.AcquireInfo)
	var rel []func(dlock.ReleaseInfo)
	var ren []func(dlock.RenewInfo)
	var lost []func(dlock.LostInfo)
	for _, h := range hooks {
		acq = appendHook(acq, h.Acquire)
		rel = appendHook(rel, h.Release)
		ren = appendHook(ren, h.Renew)
		lost = appendHook(lost, h.Lost)
	}
	return dlock.Hooks{
		Acquire: chain(acq),
		Release: chain(rel),
		Renew:   chain(ren),
		Lost:    chain(lost),
	}
}

func appendHook[T any](fs []func(T), f func(T)) []func(T) {
	if f == nil {
		return fs
	}
	return append(fs, f)
}

func chain[T any](fs []func(T)) func(T) {
	switch len(fs) {
	case 0:
		return nil
	case 1:
		return fs[0]
	}
	return func(v T) {
		for _, f := range fs {
			f(v)
		}
	}
}
