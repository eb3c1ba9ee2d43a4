package main

import (
	"fmt"
	"runtime"
)

// dlockVersion is the version of this release of dlock, the library and
// the command (the repository's tag is v0.1.0); CHANGELOG.md's newest
// release heading names it (TestVersionInChangelog).
const dlockVersion = "0.1.0"

const usageVersion = `Usage:
  dlock version
  dlock --version

Prints dlock's version, then the Go version it was built with and the
platform, on one line:
  dlock ` + dlockVersion + ` (go1.26.0, linux/amd64)
`

func (a *app) cmdVersion(args []string) int {
	fs := newFlagSet("version")
	if err := fs.Parse(args); err != nil {
		if isHelp(err) {
			return a.helpFor("version")
		}
		return a.usageErr("version", "version: %v", err)
	}
	if fs.NArg() > 0 {
		return a.usageErr("version", "version: takes no arguments, got %q", fs.Arg(0))
	}
	fmt.Fprintln(a.stdout, versionLine())
	return exitOK
}

// versionLine is what `dlock version` prints.
func versionLine() string {
	return fmt.Sprintf("dlock %s (%s, %s/%s)", dlockVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
