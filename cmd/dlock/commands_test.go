package main

import (
	"bytes"
	"strings"
	"testing"
)

// inProcess runs the command line in this process and returns its result.
func inProcess(args ...string) result {
	var stdout, stderr bytes.Buffer
	code := newApp(&stdout, &stderr).main(args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

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
