package main

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// inProcess runs the command line in this process and returns its result.
func inProcess(args ...string) result {
	var stdout, stderr bytes.Buffer
	code := newApp(&stdout, &stderr).main(args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// inProcessEnv runs the command line in this process with an environment
// of env (NAME=VALUE) only, the default Redis address at deadAddr, and
// the built binary as the program the demo starts again for its workers.
// It is how the tests reach the "no URL given" paths without a Redis that
// may listen at the real default.
func inProcessEnv(env []string, args ...string) result {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	var stdout, stderr lockedBuffer // the demo's workers write to stderr too
	a := newApp(&stdout, &stderr)
	a.sys = sysEnv{
		getenv:      func(k string) string { return vars[k] },
		defaultAddr: deadAddr,
		executable:  func() (string, error) { return binPath, nil },
	}
	start := time.Now()
	code := a.main(args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
}

// lockedBuffer is a bytes.Buffer that may be written concurrently.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// pathEnv is $PATH of this process, for inProcessEnv.
func pathEnv() string { return "PATH=" + os.Getenv("PATH") }

// TestCommandTable: the table alone decides what `dlock help` lists, what
// `dlock help NAME` and `dlock NAME -h` print, and what is unknown.
func TestCommandTable(t *testing.T) {
	t.Parallel()
	main := inProcess("help")
	expectCode(t, main, 0)
	if h := inProcess("-h"); h.stdout != main.stdout || h.code != 0 {
		t.Errorf("dlock -h differs from dlock help:\n%v", h)
	}
	if none := inProcess(); none.stderr != main.stdout || none.code != 2 {
		t.Errorf("dlock without a command: want the help on stderr and exit 2:\n%v", none)
	}
	for _, c := range commands {
		listed := strings.Contains(main.stdout, "\n  "+c.name+" ")
		if listed == c.hidden {
			t.Errorf("%s: hidden %v, but listed %v in:\n%s", c.name, c.hidden, listed, main.stdout)
		}
		help := inProcess("help", c.name)
		if c.usage == "" {
			expectCode(t, help, 2)
			expectStderr(t, help, `no help for "`+c.name+`"`)
			continue
		}
		expectCode(t, help, 0)
		if help.stdout != c.usage {
			t.Errorf("dlock help %s printed something else than its usage:\n%v", c.name, help)
		}
		for _, name := range append([]string{c.name}, c.aliases...) {
			for _, h := range []string{"-h", "--help"} {
				if r := inProcess(name, h); r.code != 0 || r.stdout != c.usage {
					t.Errorf("dlock %s %s: want its usage and exit 0, got:\n%v", name, h, r)
				}
			}
			if r := inProcess("help", name); r.stdout != c.usage {
				t.Errorf("dlock help %s: want the usage of %s, got:\n%v", name, c.name, r)
			}
		}
	}
	r := inProcess("nosuch")
	expectCode(t, r, 2)
	expectStderr(t, r, `dlock: unknown command "nosuch"`, "Run 'dlock help' for usage.")
	r = inProcess("help", "nosuch")
	expectCode(t, r, 2)
	expectStderr(t, r, `dlock: no help for "nosuch"`)
}
