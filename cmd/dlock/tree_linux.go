package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func init() {
	// Package initialisation runs on the main thread (the runtime locks
	// it there), whose name is the process's.
	if len(os.Args) > 1 && os.Args[1] == guardCommand {
		nameProcess(guardName)
	}
}

// nameProcess sets the name of this process (its main thread's, which
// /proc/PID/comm reports and killall and pkill match) to name, and of its
// other threads (ps -L, top -H). Called on the main thread: PR_SET_NAME
// names the calling thread only.
func nameProcess(name string) {
	if p, err := unix.BytePtrFromString(name); err == nil {
		_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(p)), 0, 0, 0)
	}
	// The threads the runtime started before this one ran; threads started
	// later copy the name of the thread that starts them.
	ents, _ := os.ReadDir("/proc/self/task")
	for _, e := range ents {
		f, err := os.OpenFile("/proc/self/task/"+e.Name()+"/comm", os.O_WRONLY, 0)
		if err != nil {
			continue
		}
		_, _ = f.WriteString(name)
		_ = f.Close()
	}
}

// becomeSubreaper makes this process the child subreaper of its
// descendants: orphans under it are reparented to it, not to init.
func becomeSubreaper() {
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// descendants lists the live processes under pid (children, their
// children...), from /proc. A zombie counts as gone.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, state, ok := procStat(p)
		if !ok || state == 'Z' {
			continue
		}
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// pidfdOpen is unix.PidfdOpen (a variable for the tests of the fallback).
var pidfdOpen = unix.PidfdOpen

// signalDescendant sends sig to pid if it is, when the signal is sent, a
// descendant of root. It reports whether it sent it.
//
// A pid read from /proc may be reaped and reused by an unrelated process
// before kill(2) reaches it. A pidfd pins the process that has the pid when
// it is opened: once the parents of that process lead to root, the signal
// goes to it or to nobody. (A process that died leaves its children to a
// subreaper before its pid is freed, so a chain of parents read from /proc
// does not pass through a reused pid.) Without pidfds (Linux before 5.3,
// or a seccomp filter that refuses them: ENOSYS, EPERM), kill(2) after the
// same check narrows the window instead.
func signalDescendant(root, pid int, sig syscall.Signal) bool {
	fd, err := pidfdOpen(pid, 0)
	switch {
	case err == nil:
		defer unix.Close(fd)
	case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM):
		fd = -1 // no pidfds: kill(2)
	default:
		return false // ESRCH: gone
	}
	if !descendsFrom(pid, root) {
		return false
	}
	if fd >= 0 {
		err := unix.PidfdSendSignal(fd, unix.Signal(sig), nil, 0)
		if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
			return err == nil
		}
	}
	return syscall.Kill(pid, sig) == nil
}

// descendsFrom reports whether root is among the parents of pid, from
// /proc.
func descendsFrom(pid, root int) bool {
	for p := pid; p > 1; {
		ppid, _, ok := procStat(p)
		if !ok {
			return false
		}
		if ppid == root {
			return true
		}
		p = ppid
	}
	return false
}

// procStat reads the parent and state of pid from /proc/PID/stat.
func procStat(pid int) (ppid int, state byte, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid ...; comm may contain spaces and parentheses.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err == nil
}

// monoNow reads CLOCK_MONOTONIC in nanoseconds: one clock for dlock and its
// guard, which wall-clock steps do not move.
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// pipeUnread reports whether the pipe fd has bytes not yet read (TIOCINQ
// is FIONREAD).
func pipeUnread(fd int) bool {
	n, err := unix.IoctlGetInt(fd, unix.TIOCINQ)
	return err == nil && n > 0
}
