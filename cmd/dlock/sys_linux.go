package main

import "syscall"

// privateServerAttr puts the private redis-server in its own process group
// and has the kernel kill it if dlock dies without stopping it.
func privateServerAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// childAttr has the kernel send SIGTERM to the command of `dlock run` if
// dlock itself dies (say, SIGKILL): nobody renews the lock any more, so the
// command must not go on as if it held it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
