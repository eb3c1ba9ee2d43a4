package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// terminalMode says where the guard puts COMMAND: in the terminal's
// foreground if dlock's stdin is a terminal whose foreground group is
// dlock's, in a group of its own if dlock runs in the background of a
// terminal, in a session of its own otherwise.
func terminalMode() string {
	fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	if err != nil {
		return modeSession // not a terminal
	}
	if fg == syscall.Getpgrp() {
		return modeForeground
	}
	return modeGroup
}

// reclaimTerminal makes dlock's group the terminal's foreground group again
// after COMMAND's group had it. SIGTTOU, which a background group gets for
// this, is ignored from here on: nothing is started after this.
func reclaimTerminal() {
	signal.Ignore(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(int(os.Stdin.Fd()), unix.TIOCSPGRP, syscall.Getpgrp())
}
