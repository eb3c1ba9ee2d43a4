package redistest_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// ctxT returns a context that is cancelled after d or when the test ends.
func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// shortClient returns a client to addr that fails fast: 200ms I/O timeouts
// and no retries, so injected faults surface as errors.
func shortClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		DialTimeout:           time.Second,
		ReadTimeout:           200 * time.Millisecond,
		WriteTimeout:          200 * time.Millisecond,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialerRetries:         1,
		PoolSize:              1,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// isTimeout reports whether err is a network or context timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// processGone reports whether no process with this pid exists any more.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// TestStartPing checks a zero-Config server: it answers, has no persistence,
// allows DEBUG, and its Addr/URL/PID/Dir and FlushAll work.
func TestStartPing(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Config{})
	ctx := ctxT(t, 5*time.Second)

	if want := "127.0.0.1:"; !strings.HasPrefix(s.Addr(), want) || s.Port == 0 {
		t.Fatalf("Addr() = %q, Port = %d", s.Addr(), s.Port)
	}
	if got, want := s.URL(), "redis://"+s.Addr()+"/0"; got != want {
		t.Fatalf("URL() = %q, want %q", got, want)
	}
	if s.PID() <= 0 {
		t.Fatalf("PID() = %d", s.PID())
	}
	if fi, err := os.Stat(s.Dir); err != nil || !fi.IsDir() {
		t.Fatalf("Dir %q: %v", s.Dir, err)
	}

	c := s.Client(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	// The zero Config has no persistence and allows DEBUG.
	if v := c.ConfigGet(ctx, "appendonly").Val()["appendonly"]; v != "no" {
		t.Errorf("appendonly = %q, want no", v)
	}
	if v := c.ConfigGet(ctx, "save").Val()["save"]; v != "" {
		t.Errorf("save = %q, want empty", v)
	}
	if err := c.Do(ctx, "DEBUG", "SLEEP", "0").Err(); err != nil {
		t.Errorf("DEBUG SLEEP 0: %v", err)
	}
	// URL works with ParseURL.
	opt, err := redis.ParseURL(s.URL())
	if err != nil || opt.Addr != s.Addr() || opt.DB != 0 {
		t.Fatalf("ParseURL(%q) = %+v, %v", s.URL(), opt, err)
	}

	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.FlushAll(ctx); err != nil {
		t.Fatalf("FlushAll: %v", err)
	}
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("DBSIZE after FlushAll = %d", n)
	}
}

// TestStartMainClose checks StartMain with ExtraArgs and that Close kills
// the process, removes the dir and is idempotent.
func TestStartMainClose(t *testing.T) {
	t.Parallel()
	s, err := redistest.StartMain(redistest.Config{ExtraArgs: []string{"--maxmemory", "10mb"}})
	if err != nil {
		t.Fatal(err)
	}
	pid, dir := s.PID(), s.Dir

	c := s.NewClient()
	defer c.Close()
	ctx := ctxT(t, 5*time.Second)
	if v := c.ConfigGet(ctx, "maxmemory").Val()["maxmemory"]; v != "10485760" {
		t.Errorf("maxmemory = %q, want 10485760 (ExtraArgs not applied)", v)
	}

	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if !processGone(pid) {
		t.Errorf("pid %d still exists after Close", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("dir %s still exists after Close (stat: %v)", dir, err)
	}
	if s.PID() != 0 {
		t.Errorf("PID() after Close = %d, want 0", s.PID())
	}
	if err := s.Restart(); err == nil {
		t.Errorf("Restart after Close succeeded")
	}
}

// TestStartErrors checks that start failures report the server's output and
// that an invalid AOF mode is rejected.
func TestStartErrors(t *testing.T) {
	t.Parallel()
	_, err := redistest.StartMain(redistest.Config{ExtraArgs: []string{"--no-such-directive", "x"}})
	if err == nil || !strings.Contains(err.Error(), "Bad directive") {
		t.Errorf("bad ExtraArgs: err = %v, want one quoting the redis-server output", err)
	}
	if _, err := redistest.StartMain(redistest.Config{AOF: "sometimes"}); err == nil {
		t.Errorf("invalid AOF mode accepted")
	}
}

// TestKillRestartAOF checks that a key written before Kill survives Restart
// with AOF on, on the same port and dir, under a new PID.
func TestKillRestartAOF(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode  string
		sleep time.Duration
	}{
		{"always", 0},
		// everysec: give the background fsync/write a second before the kill.
		{"everysec", 1100 * time.Millisecond},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			s := redistest.Start(t, redistest.Config{AOF: tc.mode})
			c := shortClient(t, s.Addr())
			ctx := ctxT(t, 10*time.Second)
			port, dir, pid := s.Port, s.Dir, s.PID()

			if err := c.Set(ctx, "survivor", "yes", 0).Err(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tc.sleep)

			if err := s.Kill(); err != nil {
				t.Fatalf("Kill: %v", err)
			}
			if !processGone(pid) {
				t.Fatalf("pid %d still exists after Kill", pid)
			}
			if s.PID() != 0 {
				t.Fatalf("PID() after Kill = %d, want 0", s.PID())
			}
			// A separate client: go-redis pools remember dial failures for a
			// while, which would make c fail right after the Restart.
			if err := shortClient(t, s.Addr()).Ping(ctx).Err(); err == nil {
				t.Fatalf("PING succeeded on a killed server")
			}
			if err := s.Kill(); err != nil {
				t.Fatalf("second Kill: %v", err)
			}
			if err := s.Pause(); err == nil {
				t.Fatalf("Pause on a killed server succeeded")
			}

			if err := s.Restart(); err != nil {
				t.Fatalf("Restart: %v", err)
			}
			if s.Port != port || s.Dir != dir {
				t.Fatalf("Restart moved the server: %d %s -> %d %s", port, dir, s.Port, s.Dir)
			}
			if s.PID() == 0 || s.PID() == pid {
				t.Fatalf("PID after Restart = %d (before %d)", s.PID(), pid)
			}
			if got, err := shortClient(t, s.Addr()).Get(ctx, "survivor").Result(); err != nil || got != "yes" {
				t.Fatalf("GET survivor after Restart = %q, %v; want \"yes\"", got, err)
			}
		})
	}
}

// TestRestartRunningNoPersistence checks that Restart kills a running server
// first and that, without persistence, data is gone afterwards.
func TestRestartRunningNoPersistence(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Config{})
	c := shortClient(t, s.Addr())
	ctx := ctxT(t, 10*time.Second)
	pid := s.PID()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil { // running: killed first
		t.Fatalf("Restart: %v", err)
	}
	if !processGone(pid) {
		t.Fatalf("old pid %d still exists after Restart", pid)
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart without persistence: err = %v, want redis.Nil", err)
	}
}

// TestPauseResume checks that a paused server times out a 200ms PING and
// answers again after Resume.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Config{})
	c := shortClient(t, s.Addr())
	if err := c.Ping(ctxT(t, 2*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}

	if err := s.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := c.Ping(ctx).Err()
	cancel()
	if err == nil {
		t.Fatalf("PING to a paused server succeeded")
	}
	if !isTimeout(err) {
		t.Errorf("PING to a paused server: %v, want a timeout", err)
	}

	if err := s.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if err := c.Ping(ctxT(t, 2*time.Second)).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

// TestCloseWhilePaused checks that Close promptly kills a SIGSTOPped server.
func TestCloseWhilePaused(t *testing.T) {
	t.Parallel()
	s, err := redistest.StartMain(redistest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close of a paused server took %v", d)
	}
	if !processGone(pid) {
		t.Errorf("pid %d still exists after Close", pid)
	}
}

// TestProxyForwards checks that the proxy forwards traffic, including values
// larger than one read chunk, and that Close is idempotent.
func TestProxyForwards(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Config{})
	p := redistest.NewProxy(t, s.Addr())
	if p.Addr() == s.Addr() || !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Fatalf("proxy Addr() = %q", p.Addr())
	}
	// Not shortClient: its 200ms I/O timeouts are for faults, and a 1 MB
	// value through the proxy can take longer on a loaded machine under
	// -race. This test is about what arrives, not how fast.
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t, 30*time.Second)
	big := strings.Repeat("x", 1<<20) // larger than one read chunk
	if err := c.Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatalf("SET via proxy: %v", err)
	}
	if got, err := s.Client(t).Get(ctx, "big").Result(); err != nil || got != big {
		t.Fatalf("GET direct: len %d, %v", len(got), err)
	}
	if got, err := c.Get(ctx, "big").Result(); err != nil || got != big {
		t.Fatalf("GET via proxy: len %d, %v", len(got), err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestProxyLatency checks that SetLatency delays a round trip by at least
// twice the latency (once per direction) and that 0 turns it off.
func TestProxyLatency(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Config{})
	p := redistest.NewProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t, 10*time.Second)
	if err := c.Ping(ctx).Err(); err != nil { // connect before adding latency
		t.Fatal(err)
	}

	const latency = 100 * time.Millisecond
	p.SetLatency(latency)
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with latency: %v", err)
	}
	// Applied in both directions, so a round trip takes at least 2*latency.
	if d := time.Since(start); d < 2*latency {
		t.Fatalf("PING with %v latency took %v, want >= %v", latency, d, 2*latency)
	}

	p.SetLatency(0)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after SetLatency(0): %v", err)
	}
}

// TestProxyBlackhole checks that a blackhole makes commands time out without
// reaching the server, and that traffic flows again once it is off.
func TestProxyBlackhole(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Config{})
	p := redistest.NewProxy(t, s.Addr())
	c := shortClient(t, p.Addr())
	if err := c.Ping(ctxT(t, 2*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}

	p.Blackhole(true)
	err := c.Set(ctxT(t, 2*time.Second), "lost", "1", 0).Err()
	if err == nil {
		t.Fatalf("SET through a blackhole succeeded")
	}
	if !isTimeout(err) {
		t.Fatalf("SET through a blackhole: %v, want a timeout", err)
	}
	// A new connection is accepted but gets no answer either.
	if err := shortClient(t, p.Addr()).Ping(ctxT(t, 2*time.Second)).Err(); !isTimeout(err) {
		t.Fatalf("PING on a new connection through a blackhole: %v, want a timeout", err)
	}

	p.Blackhole(false)
	ctx := ctxT(t, 2*time.Second)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Blackhole(false): %v", err)
	}
	// Nothing was forwarded while the blackhole was on.
	if n, err := s.Client(t).Exists(ctx, "lost").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS lost = %d, %v; want 0", n, err)
	}
}

// TestProxyCutAll checks that CutAll breaks an established connection with a
// connection error (not a timeout) while new connections still work.
func TestProxyCutAll(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Config{})
	p := redistest.NewProxy(t, s.Addr())

	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("raw PING via proxy = %q, %v", line, err)
	}

	p.CutAll()
	// The existing connection is dead: the read fails promptly, not by timeout.
	_, _ = conn.Write([]byte("PING\r\n"))
	if line, err := br.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("read after CutAll = %q, %v; want a connection error", line, err)
	}

	// New connections still work.
	c := shortClient(t, p.Addr())
	if err := c.Ping(ctxT(t, 2*time.Second)).Err(); err != nil {
		t.Fatalf("PING on a new connection after CutAll: %v", err)
	}
}

// TestRestartPortTaken checks that Restart reports a bind failure when its
// port is taken and succeeds once it is free again.
func TestRestartPortTaken(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Config{})
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", s.Addr()) // squat on the server's port
	if err != nil {
		t.Fatal(err)
	}
	err = s.Restart()
	_ = ln.Close()
	if err == nil || !strings.Contains(err.Error(), "Address already in use") {
		t.Fatalf("Restart with its port taken: err = %v, want one quoting the bind error", err)
	}
	if s.PID() != 0 {
		t.Fatalf("PID() after failed Restart = %d, want 0", s.PID())
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart after the port was freed: %v", err)
	}
	if err := shortClient(t, s.Addr()).Ping(ctxT(t, 2*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
}

// fatalTB records Fatalf instead of failing the real test.
type fatalTB struct {
	*testing.T
	msg string
}

// Fatalf records the message and stops the calling goroutine, like t.Fatalf.
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Skipf would hide a missing redis-server; it must never be called.
func (f *fatalTB) Skipf(format string, args ...any) {
	f.T.Errorf("Skipf called: "+format, args...)
	runtime.Goexit()
}

// TestMissingBinaryFails checks that a missing redis-server fails (never
// skips) with install instructions, from both StartMain and Start.
// Not parallel: it changes PATH for the whole process (parallel tests only
// run after all sequential ones have finished).
func TestMissingBinaryFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(redistest.ServerEnv, "")

	_, err := redistest.StartMain(redistest.Config{})
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y redis-server") {
		t.Errorf("StartMain without redis-server: err = %v, want install instructions", err)
	}

	f := &fatalTB{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redistest.Start(f, redistest.Config{})
		t.Errorf("Start without redis-server returned")
	}()
	<-done
	if !strings.Contains(f.msg, "apt-get install -y redis-server") {
		t.Errorf("Start without redis-server: Fatalf(%q), want install instructions", f.msg)
	}
}

// TestServerEnv checks that ServerEnv chooses the program (a server the
// harness cannot find fails with install instructions naming it) and that
// a program that is not a server, such as the check-rdb tool Debian's
// server links point to, fails with ErrNotServer before anything starts.
// Not parallel: it changes the environment.
func TestServerEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(redistest.ServerEnv, filepath.Join(dir, "nosuch-server"))
	if got := redistest.ServerBinary(); got != filepath.Join(dir, "nosuch-server") {
		t.Errorf("ServerBinary() = %q, want the value of %s", got, redistest.ServerEnv)
	}
	_, err := redistest.StartMain(redistest.Config{})
	if err == nil || !strings.Contains(err.Error(), "nosuch-server not found") {
		t.Errorf("StartMain with a missing %s: err = %v, want it named as not found", redistest.ServerEnv, err)
	}

	// A program whose --version does not say "server": what running
	// valkey-check-rdb (or redis-check-rdb) under its own name prints.
	fake := filepath.Join(dir, "valkey-check-rdb")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'valkey-check-rdb v=8.0.1 sha=00000000:0'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(redistest.ServerEnv, fake)
	if _, err := redistest.StartMain(redistest.Config{}); !errors.Is(err, redistest.ErrNotServer) {
		t.Errorf("StartMain with %s=%s: err = %v, want ErrNotServer", redistest.ServerEnv, fake, err)
	}
	f := &fatalTB{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redistest.Start(f, redistest.Config{})
		t.Errorf("Start with a check-rdb program returned")
	}()
	<-done
	if !strings.Contains(f.msg, redistest.ErrNotServer.Error()) {
		t.Errorf("Start with a check-rdb program: Fatalf(%q), want ErrNotServer's text", f.msg)
	}
}

// TestCLIBinary checks how the cluster's client is chosen: CLIEnv, else
// the "-cli" beside a ServerEnv program named "*-server", else redis-cli.
func TestCLIBinary(t *testing.T) {
	dir := t.TempDir()
	srv, cli := filepath.Join(dir, "valkey-server"), filepath.Join(dir, "valkey-cli")
	for _, f := range []string{srv, cli} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ server, cli, want string }{
		{"", "", "redis-cli"},
		{srv, "", cli},
		{srv, "/opt/x/redis-cli", "/opt/x/redis-cli"},
		{filepath.Join(dir, "other-server"), "", "redis-cli"}, // no other-cli beside it
		{filepath.Join(dir, "valkey"), "", "redis-cli"},       // not named *-server
	} {
		t.Setenv(redistest.ServerEnv, c.server)
		t.Setenv(redistest.CLIEnv, c.cli)
		if got := redistest.CLIBinary(); got != c.want {
			t.Errorf("%s=%q %s=%q: CLIBinary() = %q, want %q", redistest.ServerEnv, c.server, redistest.CLIEnv, c.cli, got, c.want)
		}
	}
}

// TestServerIsTheChosenProgram checks that the server the harness starts
// runs the program ServerBinary names (INFO server's executable), under
// that name: Debian's valkey-server is a link, and the program serves
// only when started as it.
func TestServerIsTheChosenProgram(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Config{})
	info, err := s.Client(t).Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Base(redistest.ServerBinary())
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "executable:"); ok {
			if filepath.Base(v) != want {
				t.Errorf("INFO server executable:%s, want a program named %s", v, want)
			}
			return
		}
	}
	t.Errorf("INFO server has no executable field:\n%s", info)
}
