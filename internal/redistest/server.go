// Package redistest is a test harness that runs real redis-server processes
// (no mocks, no in-memory fakes) on free loopback ports, and an in-process TCP
// proxy for network fault injection. The environment variable
// DLOCK_REDIS_SERVER (ServerEnv) runs another server program instead, such
// as Valkey's valkey-server (see ServerBinary and CLIBinary).
//
// Every server gets its own temporary directory and port, is started in its
// own process group (so signals sent to the test process, such as Ctrl-C, do
// not reach it) and is always stopped by PID. Servers started with [Start] are
// killed and their directory removed by t.Cleanup, even if the test fails.
// As a last line of defence against leaks when the test binary itself dies
// (for example on a `go test -timeout` panic), each redis-server is started
// with a parent-death signal of SIGKILL.
//
// All methods are safe for concurrent use.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds how long a start waits for PING to be answered.
	readyTimeout = 10 * time.Second
	// pollInterval is the delay between two readiness probes.
	pollInterval = 10 * time.Millisecond
	// exitTimeout bounds how long Kill waits for a SIGKILLed process to be reaped.
	exitTimeout = 10 * time.Second
	// startAttempts is how often a start is retried when redis-server cannot bind its port.
	startAttempts = 5
	// logTailLines is how many trailing log lines are quoted in errors.
	logTailLines = 25
)

// Config describes how a server is started.
//
// The zero value starts a server without any persistence
// (--save "" --appendonly no) and with --enable-debug-command yes.
type Config struct {
	// AOF selects append-only-file persistence: "" leaves it off; "always" or
	// "everysec" turn on --appendonly yes with that --appendfsync policy.
	// Any other value makes the start fail.
	AOF string
	// ExtraArgs are appended to the redis-server command line after all
	// arguments set by this package, so they can override them; for example
	// []string{"--maxmemory", "10mb"}.
	ExtraArgs []string
	// TLS also opens a TLS port (Server.TLSPort) with certificates made for
	// the server (Server.TLS); the plain port stays open. TLSAuthClients
	// makes the TLS port require a client certificate signed by the CA.
	TLS, TLSAuthClients bool
}

// args returns the redis-server command line (without the program name) for
// a server listening on port with working directory dir.
func (c Config) args(port int, dir string) ([]string, error) {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--enable-debug-command", "yes",
		"--daemonize", "no",
		"--logfile", filepath.Join(dir, "redis.log"),
	}
	switch c.AOF {
	case "":
	case "always", "everysec":
		args = append(args, "--appendonly", "yes", "--appendfsync", c.AOF)
	default:
		return nil, fmt.Errorf("redistest: invalid Config.AOF %q (want \"\", \"always\" or \"everysec\")", c.AOF)
	}
	return append(args, c.ExtraArgs...), nil
}

// Server is a redis-server process owned by the test.
//
// Port and Dir never change for the lifetime of the Server, including across
// [Server.Restart]. Treat them as read-only.
type Server struct {
	// Port is the TCP port the server listens on, on 127.0.0.1.
	Port int
	// Dir is the server's own temporary directory. It is the server's working
	// directory (--dir, so AOF/RDB files live here) and holds redis.log and
	// stderr.log. Close removes it.
	Dir string
	// TLSPort is the TLS port on 127.0.0.1 with Config.TLS (else 0), and
	// TLS its certificate files (in Dir).
	TLSPort int
	TLS     *TLSFiles

	cfg Config

	mu     sync.Mutex // serialises lifecycle operations; guards the fields below
	cur    *process   // most recently started process; nil only before the first start
	closed bool
}

// process is one incarnation of redis-server.
type process struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // result of cmd.Wait; valid after done is closed
}

// exited reports whether the process has exited and been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Start starts a redis-server configured by cfg on a free loopback port in its
// own temporary directory and waits until it answers PING (at most 10s).
// It registers a t.Cleanup that kills the server by PID (SIGKILL, then waits
// for it to exit) and removes its directory; if the test failed, the tail of
// the server log is logged first.
//
// If the server program (redis-server, or the one DLOCK_REDIS_SERVER names)
// cannot be found, Start fails the test with t.Fatalf and a message
// explaining how to install it; it deliberately does not skip.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	if err := checkBinaries(false); err != nil {
		t.Fatalf("%v", err)
	}
	s, err := StartMain(cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if tail := logTail(s.Dir, nil); tail != "" {
				t.Logf("redistest: tail of logs of %s on %s:\n%s", ServerBinary(), s.Addr(), tail)
			}
		}
		if err := s.Close(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
	return s
}

// StartMain is like [Start] for code without a testing.TB, such as TestMain:
// it returns the started server or an error (including a missing
// redis-server binary) and the caller must call [Server.Close].
func StartMain(cfg Config) (*Server, error) {
	if err := checkBinaries(false); err != nil {
		return nil, err
	}
	if _, err := cfg.args(0, ""); err != nil {
		return nil, err
	}
	cfg.ExtraArgs = append([]string(nil), cfg.ExtraArgs...) // don't alias the caller's slice

	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			return nil, fmt.Errorf("redistest: creating temp dir: %w", err)
		}
		s := &Server{Port: port, Dir: dir, cfg: cfg}
		if cfg.TLS {
			if s.TLSPort, err = freePort(); err == nil {
				s.TLS, err = makeTLSFiles(dir)
			}
			if err != nil {
				_ = os.RemoveAll(dir)
				return nil, err
			}
		}
		p, err := s.spawn()
		if err == nil {
			s.cur = p
			return s, nil
		}
		_ = os.RemoveAll(dir)
		lastErr = err
		if !errors.Is(err, errPortInUse) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("redistest: giving up after %d attempts: %w", startAttempts, lastErr)
}

// errPortInUse marks a start that failed because the port was taken.
var errPortInUse = errors.New("port already in use")

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: finding a free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, fmt.Errorf("redistest: finding a free port: %w", err)
	}
	return port, nil
}

// spawn starts one redis-server process on s.Port in s.Dir and waits until it
// answers PING. On failure the process is gone when spawn returns. An error
// wrapping errPortInUse means redis-server could not bind its port.
func (s *Server) spawn() (*process, error) {
	args, err := s.cfg.args(s.Port, s.Dir)
	if err != nil {
		return nil, err
	}
	if s.TLS != nil {
		args = append(args, tlsArgs(s.TLSPort, s.TLS, s.cfg.TLSAuthClients)...)
	}
	// Earlier incarnations (Restart) share the log files; errors quote only
	// what this one wrote.
	offsets := logSizes(s.Dir)
	stderr, err := os.OpenFile(filepath.Join(s.Dir, "stderr.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	defer stderr.Close() // the child has its own copy after Start

	bin := ServerBinary()
	cmd := exec.Command(bin, args...)
	cmd.Dir = s.Dir
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,            // own process group: test-process signals don't reach it
		Pdeathsig: syscall.SIGKILL, // dies with the test binary even if cleanup never runs
	}
	if err := startOnSpawnerThread(cmd); err != nil {
		return nil, fmt.Errorf("redistest: starting %s: %w", bin, err)
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()

	if err := waitReady(s.Addr(), p); err != nil {
		_ = kill(p)
		tail := logTail(s.Dir, offsets)
		if strings.Contains(tail, "Address already in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return nil, fmt.Errorf("redistest: %s on %s (dir %s): %w\n%s", bin, s.Addr(), s.Dir, err, tail)
	}
	return p, nil
}

// spawnOnce starts the spawner goroutine, which is fed by spawnRequests;
// see startOnSpawnerThread.
var (
	spawnOnce     sync.Once
	spawnRequests chan spawnRequest
)

// spawnRequest asks the spawner goroutine to start cmd and send the result
// of cmd.Start on res.
type spawnRequest struct {
	cmd *exec.Cmd
	res chan error
}

// startOnSpawnerThread calls cmd.Start on a dedicated goroutine that is locked
// to its OS thread for the life of the process. Pdeathsig fires when the
// *thread* that forked the child exits, and the Go runtime may retire threads;
// a permanently locked thread makes the signal fire only when the test binary
// itself exits.
func startOnSpawnerThread(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnRequests = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as the process
			for r := range spawnRequests {
				r.res <- r.cmd.Start()
			}
		}()
	})
	res := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd: cmd, res: res}
	return <-res
}

// waitReady polls addr every pollInterval until the server process p answers
// PING, p exits, or readyTimeout passes.
func waitReady(addr string, p *process) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		if ok, err := probe(addr, p); ok {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("no PING answer within %v (last probe: %v)", readyTimeout, err)
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before answering PING: %v", p.err)
		case <-time.After(pollInterval):
		}
	}
}

// probe sends PING to addr over a fresh connection. It reports true when the
// server answered +PONG and INFO shows it is process p (not some other server
// that happens to own the port), or when it answered -NOAUTH (a password was
// configured through ExtraArgs, so identity can't be checked). A -LOADING
// reply (AOF still being loaded) counts as not ready. The probe is abandoned
// as soon as p exits.
func probe(addr string, p *process) (bool, error) {
	pid := p.pid
	conn, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return false, err
	}
	stop := make(chan struct{})
	defer func() {
		close(stop)
		_ = conn.Close()
	}()
	go func() {
		select {
		case <-p.done: // don't wait on whatever else holds the port
			_ = conn.Close()
		case <-stop:
		}
	}()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return false, err
	}
	br := bufio.NewReader(conn)
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return false, err
	}
	line, err := br.ReadString('\n')
	if err != nil {
		return false, err
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case line == "+PONG":
	case strings.HasPrefix(line, "-NOAUTH"):
		return true, nil
	default:
		return false, fmt.Errorf("PING reply %q", line)
	}

	if _, err := io.WriteString(conn, "INFO server\r\n"); err != nil {
		return false, err
	}
	header, err := br.ReadString('\n')
	if err != nil {
		return false, err
	}
	header = strings.TrimRight(header, "\r\n")
	if !strings.HasPrefix(header, "$") {
		return false, fmt.Errorf("INFO reply %q", header)
	}
	n, err := strconv.Atoi(header[1:])
	if err != nil || n < 0 {
		return false, fmt.Errorf("INFO reply %q", header)
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(br, body); err != nil {
		return false, err
	}
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
			if v == strconv.Itoa(pid) {
				return true, nil
			}
			return false, fmt.Errorf("port is served by another redis-server (pid %s, want %d)", v, pid)
		}
	}
	return false, errors.New("INFO server has no process_id")
}

// kill SIGKILLs p (and its process group, which holds any fork children such
// as AOF-rewrite processes) and waits until p has been reaped.
func kill(p *process) error {
	if p.exited() {
		return nil
	}
	// Its process group id is its PID (Setpgid). ESRCH just means it is gone.
	if err := syscall.Kill(-p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("redistest: SIGKILL process group %d: %w", p.pid, err)
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redistest: SIGKILL pid %d: %w", p.pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(exitTimeout):
		return fmt.Errorf("redistest: redis-server pid %d did not exit within %v of SIGKILL", p.pid, exitTimeout)
	}
}

// logFiles are the files in a server's directory that logTail quotes.
var logFiles = []string{"stderr.log", "redis.log"}

// logSizes returns the current sizes of the logFiles in dir (missing files
// count as 0), for use as logTail offsets.
func logSizes(dir string) map[string]int64 {
	sizes := make(map[string]int64, len(logFiles))
	for _, name := range logFiles {
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil {
			sizes[name] = fi.Size()
		}
	}
	return sizes
}

// logTail returns the last lines of stderr.log and redis.log in dir, for
// error messages, skipping the first offsets[name] bytes of each file (nil
// offsets: whole files). It returns "" if there is nothing to show.
func logTail(dir string, offsets map[string]int64) string {
	var b strings.Builder
	for _, name := range logFiles {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		if off := offsets[name]; off > 0 && off <= int64(len(data)) {
			data = data[off:]
		}
		data = bytes.TrimSpace(data)
		if len(data) == 0 {
			continue
		}
		lines := strings.Split(string(data), "\n")
		if len(lines) > logTailLines {
			lines = lines[len(lines)-logTailLines:]
		}
		fmt.Fprintf(&b, "--- tail of %s ---\n%s\n", name, strings.Join(lines, "\n"))
	}
	return b.String()
}

// Close kills the server by PID (SIGKILL, then waits for it to exit) and
// removes its directory. It is idempotent: calls after the first return nil.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.cur != nil {
		errs = append(errs, kill(s.cur))
	}
	if err := os.RemoveAll(s.Dir); err != nil {
		errs = append(errs, fmt.Errorf("redistest: removing %s: %w", s.Dir, err))
	}
	return errors.Join(errs...)
}

// Addr returns the server address, "127.0.0.1:port".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
}

// URL returns a redis URL for database 0, "redis://127.0.0.1:port/0",
// suitable for redis.ParseURL.
func (s *Server) URL() string {
	return "redis://" + s.Addr() + "/0"
}

// PID returns the process id of the running redis-server, or 0 if it is not
// running (after Kill or Close, or if it died). The PID changes on Restart.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil || s.cur.exited() {
		return 0
	}
	return s.cur.pid
}

// Client returns a new go-redis client with default options connected to the
// server; it is closed in t.Cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := s.NewClient()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// NewClient returns a new go-redis client with default options connected to
// the server. The caller must close it.
func (s *Server) NewClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr()})
}

// Kill sends SIGKILL to the server (by PID, and to its process group so fork
// children such as an AOF rewrite die too) and waits until it has exited.
// The server stays dead until [Server.Restart]. Killing a server that is not
// running is a no-op.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("redistest: Kill on closed server")
	}
	return kill(s.cur)
}

// Pause stops the server with SIGSTOP: it keeps its sockets (the kernel still
// accepts connections) but answers nothing until [Server.Resume].
// Kill, Restart and Close work on a paused server.
func (s *Server) Pause() error {
	return s.signal(syscall.SIGSTOP)
}

// Resume continues a server stopped by [Server.Pause] (SIGCONT).
func (s *Server) Resume() error {
	return s.signal(syscall.SIGCONT)
}

// signal sends sig to the running server process.
func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("redistest: %v on closed server", sig)
	}
	if s.cur.exited() {
		return fmt.Errorf("redistest: %v: redis-server on %s is not running", sig, s.Addr())
	}
	if err := s.cur.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("redistest: %v to pid %d: %w", sig, s.cur.pid, err)
	}
	return nil
}

// Restart kills the server if it is running (SIGKILL, then waits), starts it
// again with the same configuration on the SAME port and in the SAME
// directory (so AOF data, if enabled, is reloaded) and waits until it answers
// PING. If the port is briefly unavailable it retries a few times.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("redistest: Restart on closed server")
	}
	if err := kill(s.cur); err != nil {
		return err
	}
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		if attempt > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		var p *process
		if p, err = s.spawn(); err == nil {
			s.cur = p
			return nil
		}
		if !errors.Is(err, errPortInUse) {
			return err
		}
	}
	return fmt.Errorf("redistest: giving up after %d attempts: %w", startAttempts, err)
}

// FlushAll runs FLUSHALL on the server over a short-lived connection.
func (s *Server) FlushAll(ctx context.Context) error {
	c := s.NewClient()
	defer c.Close()
	if err := c.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("redistest: FLUSHALL on %s: %w", s.Addr(), err)
	}
	return nil
}
