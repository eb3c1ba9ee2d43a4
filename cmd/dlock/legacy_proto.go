package main

import (
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/legacy"
)

// legacyProtocol is --protocol legacy: the SETNX/GETSET timestamp lock of older C# and Python code, whose
// value is an expiry timestamp in unit ("s" or "ms").
func legacyProtocol(unit string) (dlock.LockOption, error) {
	var o legacy.Options
	switch unit {
	case "s", "sec", "seconds":
		o.Unit = legacy.Seconds
	case "ms", "milliseconds":
		o.Unit = legacy.Milliseconds
	default:
		return nil, fmt.Errorf("--legacy-unit %q: want s or ms", unit)
	}
	return dlock.WithProtocol(legacy.New(o)), nil
}
