// Command bench runs dlock and the peer Go lock libraries (go-redsync/redsync,
// bsm/redislock, rueidis' rueidislock) side by side against one
// redis-server that it starts itself, in uncontended, contended and hand-off scenarios, and
// prints a Markdown table (or JSON with --json). See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		duration     = fs.Duration("duration", 0, "length of every scenario (default: each scenario's own, 2s or 5s)")
		roundTimeout = fs.Duration("round-timeout", 10*time.Second, "bound of each drain round: waiters still without the lock then count as failures")
		scenarioRE   = fs.String("scenario", "", "run only the scenarios whose name matches this regular expression")
		libRE        = fs.String("lib", "", "run only the library configurations whose name matches this regular expression")
		asJSON       = fs.Bool("json", false, "print JSON instead of Markdown")
		quick        = fs.Bool("quick", false, fmt.Sprintf("every scenario for %v only (a smoke test: about a minute, more when a library misses drain rounds)", quickDuration))
		list         = fs.Bool("list", false, "list the scenarios and library configurations and exit")
		quiet        = fs.Bool("q", false, "no progress lines on stderr")
		runs         = fs.Int("runs", 1, "run every selected scenario and library this many times, in turn, and report the goals' medians")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run . [flags]   (from the bench directory)\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	opts := options{Duration: *duration, RoundTimeout: *roundTimeout, Quick: *quick, Runs: *runs}
	if *duration < 0 || *roundTimeout <= 0 || *runs < 1 {
		fmt.Fprintln(stderr, "bench: --duration must not be negative, --round-timeout and --runs must be positive")
		return 2
	}
	for _, f := range []struct {
		s  string
		re **regexp.Regexp
	}{{*scenarioRE, &opts.Scenarios}, {*libRE, &opts.Libs}} {
		if f.s == "" {
			continue
		}
		re, err := regexp.Compile(f.s)
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 2
		}
		*f.re = re
	}
	if *list {
		ss, ls := selected(opts)
		for _, s := range ss {
			fmt.Fprintf(stdout, "scenario %-22s %s (default %v)\n", s.Name, s.Desc, s.Duration)
		}
		for _, l := range ls {
			fmt.Fprintf(stdout, "lib      %-22s %s: %s\n", l.Name, l.Library, l.Settings)
		}
		return 0
	}
	if !*quiet {
		opts.Progress = stderr
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, err := runAll(ctx, opts)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	if *asJSON {
		if err := writeJSON(stdout, b); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
	} else {
		writeMarkdown(stdout, b)
	}
	code := 0
	for _, o := range b.outcomes() {
		if o.Res.Overlaps > 0 {
			fmt.Fprintf(stderr, "bench: %s / %s: %d overlapping critical sections: a broken lock\n",
				o.Scenario.Name, o.Lib.Name, o.Res.Overlaps)
			if o.Lib.Library == "dlock" {
				code = 1 // a peer's overlap is reported, dlock's fails the run
			}
		}
	}
	return code
}
