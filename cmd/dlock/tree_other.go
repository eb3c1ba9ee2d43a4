//go:build !linux

package main

// becomeSubreaper: only Linux has child subreapers. Elsewhere an orphan
// under the lock goes to init, and only COMMAND's process group is
// signalled.
func becomeSubreaper() {}

// descendants: not available outside Linux (no /proc of this form).
func descendants(pid int) []int { return nil }
