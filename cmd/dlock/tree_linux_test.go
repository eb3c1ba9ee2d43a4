package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSignalDescendant: the guard's kill signals a process under it, and
// refuses a pid whose parents no longer lead to it (reparented, as a pid
// reused by another process would be), through pidfds and without them.
// (Not parallel: it replaces pidfdOpen.)
func TestSignalDescendant(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(int, int) (int, error)
	}{
		{"pidfd", unix.PidfdOpen},
		{"no pidfd", func(int, int) (int, error) { return -1, unix.ENOSYS }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saved := pidfdOpen
			pidfdOpen = tc.open
			t.Cleanup(func() { pidfdOpen = saved })

			// A child of this process: signalled.
			child := exec.Command("sleep", "60")
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			if !signalDescendant(os.Getpid(), child.Process.Pid, syscall.SIGKILL) {
				t.Error("the child was not signalled")
			}
			if err := child.Wait(); err == nil {
				t.Error("the child exited on its own")
			} else if ws, ok := child.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
				t.Errorf("the child ended with %v, want SIGKILL", err)
			}

			// A grandchild whose parent exited: reparented away from it
			// (the parent stays a zombie, its pid not reused). Refused.
			pidFile := filepath.Join(t.TempDir(), "pid")
			parent := exec.Command("sh", "-c", "sleep 60 & echo $! > "+pidFile+".tmp; mv "+pidFile+".tmp "+pidFile)
			if err := parent.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = parent.Wait() })
			orphan := readPid(t, pidFile)
			killAtCleanup(t, orphan)
			waitFor(t, 10*time.Second, "the parent to exit", func() bool { return processGone(parent.Process.Pid) })
			if ppid, _, ok := procStat(orphan); !ok || ppid == parent.Process.Pid {
				t.Fatalf("the orphan's parent: %d, %v", ppid, ok)
			}
			if signalDescendant(parent.Process.Pid, orphan, syscall.SIGKILL) {
				t.Error("a process no longer under its former parent was signalled")
			}
			time.Sleep(50 * time.Millisecond)
			if processGone(orphan) {
				t.Error("the orphan was killed")
			}
		})
	}
}
