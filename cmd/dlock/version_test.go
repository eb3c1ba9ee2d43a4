package main

import (
	"os"
	"regexp"
	"runtime"
	"testing"
)

// TestVersion: `dlock version` and `dlock --version` print the release's
// version, the Go version and the platform on one line, and exit 0.
func TestVersion(t *testing.T) {
	t.Parallel()
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(dlockVersion) {
		t.Fatalf("dlockVersion %q is not MAJOR.MINOR.PATCH", dlockVersion)
	}
	want := "dlock " + dlockVersion + " (" + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		r := inProcess(args...)
		expectCode(t, r, 0)
		if r.stdout != want || r.stderr != "" {
			t.Errorf("dlock %s: want stdout %q and no stderr, got:\n%v", args[0], want, r)
		}
	}
	// The built binary too (its main, not only the app's).
	if r := dlockRun(t, nil, "--version"); r.code != 0 || r.stdout != want {
		t.Errorf("dlock --version (binary): want %q and exit 0, got:\n%v", want, r)
	}
	for _, args := range [][]string{{"version", "x"}, {"--version", "run"}, {"version", "--nosuch"}} {
		r := inProcess(args...)
		expectCode(t, r, 2)
		expectStderr(t, r, "Run 'dlock help version' for usage.")
	}
}

// TestVersionInChangelog: the newest release CHANGELOG.md describes is
// the one `dlock version` prints.
func TestVersionInChangelog(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## ([0-9]+\.[0-9]+\.[0-9]+)\b`).FindSubmatch(b)
	if m == nil {
		t.Fatal("CHANGELOG.md has no release heading (## MAJOR.MINOR.PATCH ...)")
	}
	if got := string(m[1]); got != dlockVersion {
		t.Errorf("CHANGELOG.md's newest release is %s, dlock version says %s", got, dlockVersion)
	}
}
