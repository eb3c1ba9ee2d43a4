package main

import (
	"fmt"
	"strings"
)

// command is one entry of the command table, which drives dispatch,
// `dlock help`, `dlock help NAME`, `dlock NAME -h` and the unknown-command
// error: a command exists, is listed and has help exactly when it is here.
type command struct {
	name    string
	aliases []string
	// summary is the command's line in `dlock help`; synopsis, if set,
	// follows it in a column of its own.
	summary, synopsis string
	// usage is the text of `dlock help NAME` and `dlock NAME -h`; a command
	// without one has no help ("no help for ...").
	usage string
	run   func(a *app, args []string) int
	// hidden commands are not listed in `dlock help`: the subcommands this
	// program runs itself as (the guard of `run`, the demo's workers).
	hidden bool
}

// commands is the command table, in the order of `dlock help`. It is set
// in init because help refers to it.
var commands []*command

func init() {
	commands = []*command{
		{name: "run", summary: "run a command while holding a lock", synopsis: "dlock run KEY [--] COMMAND [ARG...]",
			usage: usageRun, run: (*app).cmdRun},
		{name: "elect", summary: "run a command while leader", synopsis: "dlock elect NAME [--id ID] [--again] [--] COMMAND [ARG...]",
			usage: usageElect, run: (*app).cmdElect},
		{name: "leader", summary: "show an election's leader", synopsis: "dlock leader NAME [--json]",
			usage: usageLeader, run: (*app).cmdLeader},
		{name: "observe", summary: "print every change of leader", synopsis: "dlock observe NAME [--json]",
			usage: usageObserve, run: (*app).cmdObserve},
		{name: "status", summary: "show who holds a lock", synopsis: "dlock status KEY [--json]",
			usage: usageStatus, run: (*app).cmdStatus},
		{name: "list", aliases: []string{"ls"}, summary: "list locks", synopsis: "dlock list [PATTERN] [--json]",
			usage: usageList, run: (*app).cmdList},
		{name: "release", summary: "release a lock", synopsis: "dlock release KEY (--token T | --force)",
			usage: usageRelease, run: (*app).cmdRelease},
		{name: "demo", summary: "show what locks are for (flash sale, ids, rate limit, election), against a real Redis",
			usage: usageDemo, run: (*app).cmdDemo},
		{name: "bench", summary: "contention benchmark of dlock against the configured Redis",
			usage: usageBench, run: (*app).cmdBench},
		{name: "help", summary: "help on a command", synopsis: "dlock help run",
			run: (*app).cmdHelp},
		{name: "version", summary: "print dlock's version", usage: usageVersion, run: (*app).cmdVersion},
		{name: guardCommand, hidden: true, run: (*app).cmdGuard},
		{name: workerCommand, hidden: true, run: (*app).cmdWorker},
	}
}

// lookup returns the command called name (or one of its aliases), or nil.
func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
		for _, al := range c.aliases {
			if al == name {
				return c
			}
		}
	}
	return nil
}

// usageMain is the text of `dlock help`.
func usageMain() string {
	var b strings.Builder
	b.WriteString(usageHead)
	for _, c := range commands {
		switch {
		case c.hidden:
		case c.synopsis != "":
			fmt.Fprintf(&b, "  %-8s %-38s%s\n", c.name, c.summary+":", c.synopsis)
		default:
			fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
		}
	}
	b.WriteString(usageTail)
	return b.String()
}
