// Command dlock runs a command under a distributed lock on Redis, inspects
// and releases locks, demonstrates what locks are for, and benchmarks them.
//
//	dlock run [flags] KEY [--] COMMAND [ARG...]
//	dlock elect NAME [--id ID] [--again] [--] COMMAND [ARG...]
//	dlock leader NAME
//	dlock observe NAME
//	dlock status KEY
//	dlock list [PATTERN]
//	dlock release KEY (--token T | --force)
//	dlock demo [flashsale | ids | ratelimit]
//	dlock bench
//	dlock version
//
// Run `dlock help` or see README.md for flags, URL forms and exit codes.
package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// Exit codes. `dlock run` passes the command's own status through; these
// are the codes dlock itself uses (see usageTail).
const (
	exitOK          = 0
	exitNotAcquired = 1   // default of -E; also "check failed" for demo and bench
	exitUsage       = 2   // bad flags or arguments
	exitFree        = 3   // status/release/list: nothing is held
	exitNotLock     = 4   // status/release: the key holds a non-string value
	exitLost        = 124 // the lock was lost while the command ran
	exitFailed      = 125 // dlock failed before the command ran (Redis unreachable, bad URL)
	exitNoExec      = 126 // the command was found but could not be executed
	exitNotFound    = 127 // the command was not found
)

// usageHead and usageTail frame the command list of `dlock help`, which is
// made from the command table.
const usageHead = `dlock: distributed locks on Redis.

Usage:
  dlock [global flags] COMMAND [flags] [ARGS]

Commands:
`

const usageTail = `
Global flags (also accepted after the command name):
  --redis URL     Redis to use. Default: $DLOCK_REDIS_URL, else $REDIS_URL,
                  else redis://127.0.0.1:6379/0. Forms:
                    redis://[user:password@]host:port/db      one server
                    rediss://...                              the same over TLS
                    unix://[user:password@]/path/redis.sock?db=N
                    redis+sentinel://[user:password@]sentinel:26379/db?master_name=NAME[&addr=host:port...]
                      (a redis:// URL with master_name=... is a Sentinel URL too; the
                       master's password goes in &password=..., the user:password in
                       front is the Sentinels')
                    redis+cluster://[user:password@]node:port[?addr=host:port...]
                  go-redis options go in the query: ?dial_timeout=3s&read_timeout=2s...
                  Passwords are never printed.
  --prefix P      prefix of dlock's auxiliary keys (fence counters). Default: dlock.
  --tls-ca FILE, --tls-cert FILE, --tls-key FILE, --tls-server-name NAME
                  for rediss:// URLs: a CA to verify the server with, a client
                  certificate and key, the name in the server's certificate (or
                  in the URL: ?tls_ca=FILE&tls_cert=FILE&tls_key=FILE&tls_server_name=N)
  --allow-eviction
                  lock even if Redis may evict keys (a maxmemory-policy other than
                  noeviction): an evicted lock key lets a second holder in. Without
                  it, dlock refuses such a Redis (exit 125).

Exit codes of dlock run:
  the command's own status   the command ran and exited
  128+N                      the command was killed by signal N (or dlock got signal N
                             while waiting for the lock)
  1 (or -E CODE)             the lock was not acquired (-n: held; -w: still held at the end)
  2                          usage error
  124                        the lock was lost while the command ran, or renewals failed
                             so long that its process tree was stopped before the deadline
                             (SIGTERM --kill-after before it, SIGKILL at it)
  125                        dlock failed before running the command (Redis unreachable
                             or not answering, bad URL, key is not a lock, Redis may
                             evict keys)
  126                        the command was found but could not be executed
  127                        the command was not found
Other commands: 0 ok, 1 a check failed, 2 usage, 3 nothing held, 4 not a lock,
125 Redis unreachable or bad URL. See 'dlock help COMMAND'.
`

func main() {
	os.Exit(newApp(os.Stdout, os.Stderr).main(os.Args[1:]))
}

// app is one invocation of the command: its output streams, global flags
// and the redactor that keeps passwords out of every message.
type app struct {
	stdout, stderr io.Writer
	redisURL       string // --redis, "" if not given
	prefix         string // --prefix
	tls            tlsOpts
	showToken      bool // --show-token: status and list print whole tokens
	allowEviction  bool // --allow-eviction: lock on a Redis that may evict keys
	version        bool // --version before the command: `dlock version`
	redact         *redactor
	sys            sysEnv
}

func newApp(stdout, stderr io.Writer) *app {
	return &app{stdout: stdout, stderr: stderr, redact: &redactor{}, sys: processEnv()}
}

// sysEnv is what dlock takes from the process it runs in.
type sysEnv struct {
	getenv      func(string) string // the environment: $DLOCK_REDIS_URL, $REDIS_URL, $PATH
	defaultAddr string              // where Redis is looked for when no URL is given
	// executable is this program, started again as the demo's workers.
	executable func() (string, error)
}

func processEnv() sysEnv {
	return sysEnv{getenv: os.Getenv, defaultAddr: "127.0.0.1:6379", executable: os.Executable}
}

// lookPath finds an executable in the directories of $PATH, like
// exec.LookPath (which skips relative directories too, as unsafe).
func (s sysEnv) lookPath(file string) (string, error) {
	for _, dir := range filepath.SplitList(s.getenv("PATH")) {
		if !filepath.IsAbs(dir) {
			continue
		}
		if p, err := exec.LookPath(filepath.Join(dir, file)); err == nil {
			return p, nil
		}
	}
	return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
}

// errorf prints "dlock: <message>" on stderr, on one line, with every known
// secret masked.
func (a *app) errorf(format string, args ...any) {
	msg := oneLine(fmt.Sprintf(format, args...)) // a wrapped error may hold newlines
	fmt.Fprintln(a.stderr, a.redact.clean("dlock: "+msg))
}

// usageErr reports a usage error and returns exitUsage.
func (a *app) usageErr(cmd, format string, args ...any) int {
	a.errorf(format, args...)
	if cmd != "" {
		fmt.Fprintf(a.stderr, "Run 'dlock help %s' for usage.\n", cmd)
	} else {
		fmt.Fprintln(a.stderr, "Run 'dlock help' for usage.")
	}
	return exitUsage
}

// main runs the command line args (without the program name) and returns
// the exit code.
func (a *app) main(args []string) int {
	fs := newFlagSet("dlock")
	a.globalFlags(fs)
	boolFlags(fs, &a.version, "version")
	if err := fs.Parse(args); err != nil {
		if isHelp(err) {
			fmt.Fprint(a.stdout, usageMain())
			return exitOK
		}
		return a.usageErr("", "%v", err)
	}
	args = fs.Args()
	if a.version {
		return a.cmdVersion(args)
	}
	if len(args) == 0 {
		fmt.Fprint(a.stderr, usageMain())
		return exitUsage
	}
	name, rest := args[0], args[1:]
	if c := lookup(name); c != nil {
		return c.run(a, rest)
	}
	return a.usageErr("", "unknown command %q", name)
}

func (a *app) cmdHelp(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(a.stdout, usageMain())
		return exitOK
	}
	c := lookup(args[0])
	if c == nil || c.usage == "" {
		return a.usageErr("", "no help for %q", args[0])
	}
	fmt.Fprint(a.stdout, c.usage)
	return exitOK
}

// helpFor prints a command's help on stdout (for -h) and returns exitOK.
func (a *app) helpFor(name string) int {
	if c := lookup(name); c != nil {
		fmt.Fprint(a.stdout, c.usage)
	}
	return exitOK
}
