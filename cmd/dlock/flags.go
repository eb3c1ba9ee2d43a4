package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// newFlagSet returns a flag set that reports errors instead of exiting and
// prints nothing itself: every command has a hand-written help text.
// Go's flag package accepts -name and --name alike, and stops at the first
// non-flag argument, which is what `run` needs (flags of COMMAND stay
// COMMAND's).
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func isHelp(err error) bool { return errors.Is(err, flag.ErrHelp) }

// globalFlags registers --redis and --prefix on fs. They are accepted
// before the command name and after it.
func (a *app) globalFlags(fs *flag.FlagSet) {
	fs.Func("redis", "", func(s string) error {
		a.redact.addURL(s)
		a.redisURL = s
		return nil
	})
	fs.Func("prefix", "", func(s string) error {
		if strings.ContainsAny(s, "{}") || s == "" {
			return fmt.Errorf("--prefix %q: must be non-empty and must not contain '{' or '}'", s)
		}
		a.prefix = s
		return nil
	})
	boolFlags(fs, &a.allowEviction, "allow-eviction")
	for _, f := range []struct {
		name string
		p    *string
	}{{"tls-ca", &a.tls.ca}, {"tls-cert", &a.tls.cert}, {"tls-key", &a.tls.key}, {"tls-server-name", &a.tls.serverName}} {
		fs.Func(f.name, "", func(s string) error {
			if s == "" {
				return fmt.Errorf("--%s: empty", f.name)
			}
			*f.p = s
			return nil
		})
	}
}

// parseInterspersed parses flags anywhere among the positional arguments
// (`dlock release KEY --force`), up to a "--", after which everything is
// positional. It returns the positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var tail []string
	for i, s := range args {
		if s == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	return append(pos, tail...), nil
}

// durationValue is a flag.Value for a duration that also accepts a plain
// number of seconds ("5", "0.5"), as flock -w does.
type durationValue struct {
	d   time.Duration
	set bool
}

func (v *durationValue) String() string { return v.d.String() }

func (v *durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	v.d, v.set = d, true
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return 0, fmt.Errorf("duration %q is not a finite number", s)
		case f < 0:
			return 0, fmt.Errorf("negative duration %q", s)
		case f*float64(time.Second) >= float64(math.MaxInt64):
			return 0, fmt.Errorf("duration %q is out of range: at most %v", s, maxDuration)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		if durationSyntax.MatchString(s) {
			return 0, fmt.Errorf("duration %q is out of range: at most %v", s, maxDuration)
		}
		return 0, fmt.Errorf("invalid duration %q (want e.g. 500ms, 5s, 1m or a number of seconds)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %q", s)
	}
	return d, nil
}

// durationSyntax is what time.ParseDuration accepts: a failure to parse a
// string of this form is an overflow.
var durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// maxDuration is the longest duration a flag takes (Go's time.Duration).
const maxDuration = time.Duration(math.MaxInt64)

// boolFlags registers one bool under several names (-n, --no-wait).
func boolFlags(fs *flag.FlagSet, p *bool, names ...string) {
	for _, n := range names {
		fs.BoolVar(p, n, *p, "")
	}
}

func durationFlags(fs *flag.FlagSet, p *durationValue, names ...string) {
	for _, n := range names {
		fs.Var(p, n, "")
	}
}

func intFlags(fs *flag.FlagSet, p *int, names ...string) {
	for _, n := range names {
		fs.IntVar(p, n, *p, "")
	}
}

func stringFlags(fs *flag.FlagSet, p *string, names ...string) {
	for _, n := range names {
		fs.StringVar(p, n, *p, "")
	}
}

// flagGiven reports whether the flag name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
