package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// probeTimeout bounds the check whether a Redis answers at the default
// address before demo or bench start a private one.
const probeTimeout = 300 * time.Millisecond

// probeRedis sends PING to addr over a fresh connection and returns the
// first reply line ("+PONG", "-NOAUTH ...") or "" if nothing answered
// within timeout.
func probeRedis(addr string, timeout time.Duration) string {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return ""
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return ""
	}
	return strings.TrimSpace(line)
}

const installHint = `Install Redis, or give the address of one with --redis URL:
  Debian/Ubuntu:  sudo apt-get install redis-server
  Fedora/RHEL:    sudo dnf install redis
  macOS:          brew install redis
  any, with Docker: docker run -d -p 6379:6379 redis
`

// connectOrStart is connect for demo and bench. With no URL given and no
// Redis answering PING at 127.0.0.1:6379 within 300ms, it starts a private
// redis-server from PATH for this run (stop stops it). run, status, list
// and release never do this: a private server would coordinate nothing.
func (a *app) connectOrStart(ctx context.Context) (e *endpoint, rdb redis.UniversalClient, stop func(), code int) {
	stop = func() {}
	t := a.target()
	if !t.explicit() {
		addr := a.sys.defaultAddr
		reply := probeRedis(addr, probeTimeout)
		if reply != "+PONG" {
			why := "no Redis answered at " + addr
			if reply != "" {
				why = fmt.Sprintf("the Redis at %s answered %q to PING", addr, reply)
			}
			srv, err := a.startPrivateServer()
			if err != nil {
				if errors.Is(err, exec.ErrNotFound) {
					a.errorf("%s, and redis-server is not on PATH to start a private one for this run.", why)
					fmt.Fprint(a.stderr, installHint)
				} else {
					a.errorf("%s, and starting a private redis-server failed: %v", why, err)
				}
				return nil, nil, stop, exitFailed
			}
			stop = srv.stop
			fmt.Fprintf(a.stderr, "dlock: %s; started a private redis-server (pid %d) on %s for this run, stopped at exit.\n"+
				"       (Give --redis URL or set $REDIS_URL to use your own Redis.)\n", why, srv.pid(), srv.addr)
			t = target{url: "redis://" + srv.addr + "/0", source: "private"}
		}
	}
	e, rdb, code = a.connect(ctx, t)
	if code != exitOK {
		stop()
		return nil, nil, func() {}, code
	}
	return e, rdb, stop, exitOK
}

// privateServer is a throwaway redis-server: loopback only, no
// persistence, in its own temporary directory and process group.
type privateServer struct {
	cmd  *exec.Cmd
	dir  string
	addr string
	done chan struct{} // closed when the process has been reaped
}

func (p *privateServer) pid() int { return p.cmd.Process.Pid }

func (a *app) startPrivateServer() (*privateServer, error) {
	bin, err := a.sys.lookPath("redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dlock-redis-")
	if err != nil {
		return nil, err
	}
	var last error
	for range 5 {
		port, err := freePort()
		if err != nil {
			last = err
			continue
		}
		p, err := spawnPrivate(bin, dir, port)
		if err == nil {
			return p, nil
		}
		last = err
	}
	_ = os.RemoveAll(dir)
	return nil, last
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	return port, ln.Close()
}

func spawnPrivate(bin, dir string, port int) (*privateServer, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logfile := filepath.Join(dir, "redis.log")
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", logfile)
	cmd.Dir = dir
	// Own process group: a Ctrl-C on the terminal reaches dlock, which
	// cleans up its keys and then stops the server itself. On Linux the
	// server also gets SIGKILL if dlock dies without stopping it.
	cmd.SysProcAttr = privateServerAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &privateServer{cmd: cmd, dir: dir, addr: addr, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if probeRedis(addr, 200*time.Millisecond) == "+PONG" {
			return p, nil
		}
		select {
		case <-p.done:
			log, _ := os.ReadFile(logfile)
			return nil, fmt.Errorf("redis-server exited at start: %s", lastLines(string(log), 3))
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.kill()
	return nil, fmt.Errorf("redis-server on %s did not answer PING within 5s", addr)
}

// stop kills the server and removes its directory.
func (p *privateServer) stop() {
	p.kill()
	_ = os.RemoveAll(p.dir)
}

func (p *privateServer) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // its group: it is the leader
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}
