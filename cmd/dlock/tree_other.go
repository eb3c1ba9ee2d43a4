//go:build !linux

package main

import (
	"syscall"
	"time"
)

// becomeSubreaper: only Linux has child subreapers. Elsewhere an orphan
// under the lock goes to init, and only COMMAND's process group is
// signalled.
func becomeSubreaper() {}

// descendants: not available outside Linux (no /proc of this form).
func descendants(pid int) []int { return nil }

// signalDescendant sends sig to pid (descendants lists none here).
func signalDescendant(root, pid int, sig syscall.Signal) bool {
	return syscall.Kill(pid, sig) == nil
}

// monoNow: the wall clock, in nanoseconds, shared by dlock and its guard.
func monoNow() int64 { return time.Now().UnixNano() }

// pipeUnread: not known here; the guard's reader hands orders over at once.
func pipeUnread(fd int) bool { return false }
