//go:build !linux

package main

import "syscall"

// privateServerAttr puts the private redis-server in its own process group.
// (No parent-death signal outside Linux.)
func privateServerAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// childAttr: no parent-death signal outside Linux.
func childAttr() *syscall.SysProcAttr { return nil }
