package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The process tree of `dlock run`.
//
// dlock does not start COMMAND itself. It starts a small guard: this
// program again, with the hidden subcommand guardCommand, in a process group
// of its own. The guard
//
//   - is a child subreaper (Linux): every process started under the lock
//     that loses its parent (a double-forked daemon, a `cmd &` whose shell
//     exited) becomes the guard's child instead of init's, so it can be
//     found, signalled and waited for;
//   - starts COMMAND in a process group of its own: a new session when dlock
//     has no terminal in the foreground, the terminal's foreground group
//     when it has (so Ctrl-C and job control reach COMMAND);
//   - exits only when its whole tree is gone, with COMMAND's status: like
//     flock(1), which holds the lock while any holder of its descriptor
//     lives, dlock holds the lock until the last process under it is gone;
//   - takes orders from dlock over a pipe: forward a signal to COMMAND's
//     group, or stop the whole tree (SIGTERM, then SIGCONT for the stopped
//     processes; SIGKILL, again and again until none is left; every process
//     of the group and every descendant);
//   - stops the whole tree when the pipe reaches end of file: dlock is gone
//     (even by SIGKILL) and nobody renews the lock, which holds until its
//     deadline: SIGTERM at once, SIGKILL half of --kill-after before the
//     last deadline it got (at once, if that has come);
//   - stops the tree by the lock's deadline if dlock, alive, tells it of no
//     later one (stopped with SIGSTOP, hung): dlock sends each deadline of
//     the lock as it moves, and the guard sends SIGTERM half of
//     --kill-after before the last one it got and SIGKILL at it, unless
//     dlock's own orders came first (with its SIGTERM, dlock gives the
//     time of its SIGKILL as the last deadline).
//
// The end of file of a pipe is the parent-death signal here, rather than
// PR_SET_PDEATHSIG: it is sent when the last writer is gone whatever killed
// it, has no window between fork and prctl, and does not depend on which
// OS thread of dlock started the guard (Linux sends the parent-death signal
// when that thread exits, and Go may retire threads). The guard sits in a
// process group of its own, so a signal to dlock's group (`kill -9 -PGID`)
// leaves it alive to do this.
const guardCommand = "__run-guard"

// guardName is the guard's process name on Linux (/proc/PID/comm, what ps,
// top, killall and pkill see; set at start-up, before COMMAND starts). It
// does not contain "dlock": `killall -9 dlock` or `pkill -9 dlock` would
// kill the guard along with dlock, and leave the tree running with nobody
// to stop it. Killed alone, dlock leaves its guard to stop the tree.
const guardName = "dlk-guard"

// Orders on the guard's control pipe: one byte, then for ctlSignal the
// signal number, for ctlDeadline two times (monoNow's clock, 8 bytes each,
// big-endian): when to SIGTERM and when to SIGKILL the tree if no later
// deadline comes.
const (
	ctlSignal   = 's' // forward a signal to COMMAND's process group
	ctlTerm     = 'T' // SIGTERM the whole tree
	ctlKill     = 'K' // SIGKILL the whole tree, until it is gone
	ctlDeadline = 'D' // the lock's deadline moved
)

// How the guard places COMMAND.
const (
	modeSession    = "session"    // setsid: no controlling terminal
	modeForeground = "foreground" // own group, the terminal's foreground
	modeGroup      = "group"      // own group (a terminal, but dlock is in the background)
)

// guard is dlock's handle on a started guard.
type guard struct {
	proc *os.Process
	ctl  *os.File
	mu   sync.Mutex
}

// startGuard starts the guard that runs path with argv and env for the
// command verb ("run", "elect"), which names it in the guard's messages.
func startGuard(verb, path string, argv, env []string) (*guard, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find dlock's own executable to start COMMAND under: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	mode := terminalMode()
	// argv[0] is the guard's name too: `pkill -f dlock`, which matches
	// command lines, spares it unless COMMAND's own words contain "dlock".
	args := append([]string{guardName, guardCommand, mode, verb, path}, argv...)
	p, err := os.StartProcess(exe, args, &os.ProcAttr{
		Env:   env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, r},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	return &guard{proc: p, ctl: w}, nil
}

// send writes an order; errors mean the guard is gone, which its exit
// reports.
func (g *guard) send(b ...byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, _ = g.ctl.Write(b)
}

func (g *guard) signal(sig os.Signal) { g.send(ctlSignal, byte(signum(sig))) }
func (g *guard) term()                { g.send(ctlTerm) }
func (g *guard) kill()                { g.send(ctlKill) }

// deadline tells the guard to SIGTERM the tree at term and SIGKILL it at
// kill unless a later deadline comes first.
func (g *guard) deadline(term, kill time.Time) {
	b := []byte{ctlDeadline}
	b = binary.BigEndian.AppendUint64(b, uint64(monoAt(term)))
	b = binary.BigEndian.AppendUint64(b, uint64(monoAt(kill)))
	g.send(b...)
}

// monoAt is t on monoNow's clock, which the guard shares.
func monoAt(t time.Time) int64 { return monoNow() + int64(time.Until(t)) }

// reapAll waits for every child of this process until none is left, and
// returns the status of pid. With this process a subreaper, that is its
// whole tree. If stopped is not nil, it is called with each child that
// stops and the signal that stopped it.
func reapAll(pid int, stopped func(pid int, sig syscall.Signal)) (ws syscall.WaitStatus, found bool) {
	opts := 0
	if stopped != nil {
		opts = syscall.WUNTRACED
	}
	for {
		var st syscall.WaitStatus
		p, err := syscall.Wait4(-1, &st, opts, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil: // ECHILD: no child left
			return ws, found
		case st.Stopped():
			stopped(p, st.StopSignal())
		case p == pid:
			ws, found = st, true
		}
	}
}

// cmdGuard is the guard (see guardCommand). args: MODE VERB PATH ARGV0
// [ARG...]; VERB starts its messages.
// Its exit status is COMMAND's (128+N if signal N killed it), once the
// whole tree is gone.
func (a *app) cmdGuard(args []string) int {
	if len(args) < 4 {
		a.errorf("%s: internal: want MODE VERB PATH ARGV...", guardCommand)
		return exitFailed
	}
	mode, verb, path, argv := args[0], args[1], args[2], args[3:]
	ctl := os.NewFile(3, "dlock-control")
	if ctl == nil {
		a.errorf("%s: internal: no control pipe", guardCommand)
		return exitFailed
	}
	syscall.CloseOnExec(3)
	becomeSubreaper()
	// Signals sent to the guard itself (say, `pkill -f dlock`) are dlock's
	// business, which forwards them: the guard must not die of them and
	// leave the tree unattended. Neither of SIGPIPE, which a message to a
	// stderr whose reader is gone (dlock's, killed with dlock) would bring:
	// caught, it makes the write fail instead. Ignored ones stay ignored,
	// for COMMAND; caught ones are reset for it.
	sigs := make(chan os.Signal, 8)
	caught := handledSignals()
	if !signal.Ignored(syscall.SIGPIPE) {
		caught = append(caught, syscall.SIGPIPE)
	}
	signal.Notify(sigs, caught...)
	go func() {
		for range sigs {
		}
	}()

	attr := &syscall.SysProcAttr{}
	switch mode {
	case modeSession:
		attr.Setsid = true
	case modeForeground:
		attr.Setpgid, attr.Foreground, attr.Ctty = true, true, 0
	default:
		attr.Setpgid = true
	}
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   attr,
	})
	if err != nil {
		err = unwrapStart(err)
		if errors.Is(err, fs.ErrNotExist) {
			a.errorf("%s: %s: command not found", verb, argv[0])
			return exitNotFound
		}
		a.errorf("%s: %s: cannot execute: %v", verb, argv[0], err)
		return exitNoExec
	}
	pgid := p.Pid
	t := &tree{self: os.Getpid(), pgid: pgid}

	// Ctrl-Z stops COMMAND's group, the terminal's foreground, and
	// nothing else: dlock, renewing the lock, runs on, so the shell never
	// sees its job stop and get the terminal back, and Ctrl-C reaches only
	// the stopped group. The terminal would hang, and the lock stay held,
	// until someone killed the tree from elsewhere. COMMAND is resumed
	// instead: it cannot be suspended while it holds the lock.
	suspended := func(pid int, sig syscall.Signal) {
		if sig != syscall.SIGTSTP {
			return // SIGSTOP, SIGTTIN, SIGTTOU: not a request to suspend
		}
		name := argv[0]
		if pid != p.Pid {
			name = "process " + strconv.Itoa(pid) + " under the lock"
		}
		a.errorf("%s: %s got SIGTSTP (Ctrl-Z) and is resumed: it cannot be suspended while it holds the lock (Ctrl-C stops it)", verb, name)
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	gone := make(chan syscall.WaitStatus)
	go func() {
		ws, _ := reapAll(p.Pid, suspended)
		gone <- ws
	}()
	orders := make(chan byte)
	deadlines := make(chan [2]int64)
	// reading: an order is being read or handed over. With the bytes still
	// in the pipe, it tells the backstop that a later deadline may be on
	// its way (a guard slow to start finds a backlog of them).
	var reading atomic.Bool
	ctlFD := int(ctl.Fd())
	go func() {
		defer close(orders)
		var b [17]byte
		for {
			reading.Store(false)
			if _, err := io.ReadFull(ctl, b[:1]); err != nil {
				return
			}
			reading.Store(true)
			switch b[0] {
			case ctlSignal:
				if _, err := io.ReadFull(ctl, b[1:2]); err != nil {
					return
				}
				t.signalGroup(syscall.Signal(b[1]))
			case ctlDeadline:
				if _, err := io.ReadFull(ctl, b[1:17]); err != nil {
					return
				}
				deadlines <- [2]int64{int64(binary.BigEndian.Uint64(b[1:9])), int64(binary.BigEndian.Uint64(b[9:17]))}
			default:
				orders <- b[0]
			}
		}
	}()

	var (
		again          <-chan time.Time // while killing: SIGKILL again (forks race the kill)
		termAt, killAt int64            // the backstop, on monoNow's clock
		armed, termed  bool             // a deadline came; SIGTERM was sent
		backstop       = time.NewTimer(time.Hour)
	)
	backstop.Stop()
	arm := func() {
		if !armed {
			return
		}
		next := termAt
		if termed {
			next = killAt
		}
		backstop.Reset(time.Duration(next - monoNow()))
	}
	for {
		select {
		case ws := <-gone:
			return exitStatusOf(ws)
		case d := <-deadlines:
			if !termed { // once stopping, the tree's deadline stays
				termAt, killAt, armed = d[0], d[1], true
				arm()
			}
		case <-backstop.C:
			if reading.Load() || pipeUnread(ctlFD) {
				backstop.Reset(time.Millisecond) // the latest deadline first
				continue
			}
			now := monoNow()
			switch {
			case again != nil: // already being killed
			case now >= killAt:
				t.kill(syscall.SIGKILL)
				again = time.After(20 * time.Millisecond)
				a.errorf("%s: the lock's deadline has come: sent SIGKILL to the process tree of %s", verb, argv[0])
			case !termed && now >= termAt:
				termed = true
				t.kill(syscall.SIGTERM)
				t.kill(syscall.SIGCONT)
				arm()
				a.errorf("%s: the lock's deadline is %v away and dlock, still running, has given no later one (is it stopped?): sent SIGTERM to the process tree of %s (SIGKILL at the deadline)",
					verb, time.Duration(killAt-now).Round(time.Millisecond), argv[0])
			default:
				arm()
			}
		case o, ok := <-orders:
			switch {
			case !ok:
				// dlock is gone (even by SIGKILL): nobody renews the
				// lock, which holds until its deadline. The tree gets
				// SIGTERM now, to clean up under the lock, and SIGKILL
				// where the guard would send SIGTERM (half of
				// --kill-after before the deadline), or now, if that
				// has come.
				orders = nil
				now := monoNow()
				switch {
				case again != nil: // already being killed
				case termed: // SIGTERM sent: SIGKILL comes at killAt
				case armed && now < termAt:
					termed, killAt = true, termAt
					t.kill(syscall.SIGTERM)
					t.kill(syscall.SIGCONT)
					arm()
					a.errorf("%s: dlock is gone and nobody renews the lock: sent SIGTERM to the process tree of %s (SIGKILL in %v, before the lock's deadline)",
						verb, argv[0], time.Duration(termAt-now).Round(time.Millisecond))
				default:
					t.kill(syscall.SIGKILL)
					again = time.After(20 * time.Millisecond)
					a.errorf("%s: dlock is gone and nobody renews the lock: sent SIGKILL to the process tree of %s", verb, argv[0])
				}
			case o == ctlKill:
				t.kill(syscall.SIGKILL)
				again = time.After(20 * time.Millisecond)
			case o == ctlTerm:
				termed = true
				arm()
				t.kill(syscall.SIGTERM)
				// A stopped process (SIGSTOP, Ctrl-Z) acts on SIGTERM
				// only when it runs again: continue it, or it would sit
				// until SIGKILL without a chance to clean up.
				t.kill(syscall.SIGCONT)
			}
		case <-again:
			t.kill(syscall.SIGKILL)
			again = time.After(20 * time.Millisecond)
		}
	}
}

// tree is the guard's view of its processes.
type tree struct {
	self int // the guard
	pgid int // COMMAND's process group
}

func (t *tree) signalGroup(sig syscall.Signal) {
	_ = syscall.Kill(-t.pgid, sig)
}

// kill sends sig to COMMAND's group and to every descendant of the guard,
// in whatever group or session it put itself.
func (t *tree) kill(sig syscall.Signal) {
	_ = syscall.Kill(-t.pgid, sig)
	for _, pid := range descendants(t.self) {
		signalDescendant(t.self, pid, sig)
	}
}

// exitStatusOf is the exit code for a wait status: the status, or 128+N.
func exitStatusOf(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func unwrapStart(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// childStatus names how a process ended, for messages.
func childStatus(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + signalText(ws.Signal())
	}
	return "exit status " + strconv.Itoa(ws.ExitStatus())
}

func signalText(s syscall.Signal) string {
	return fmt.Sprintf("signal %d (%v)", int(s), s)
}
