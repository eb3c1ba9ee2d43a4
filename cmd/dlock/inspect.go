package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/redis/go-redis/v9"
)

const usageStatus = `Usage:
  dlock status KEY [--json] [--show-token]

Shows whether KEY is held and by what: the kind of lock (token: a dlock
token or another SET NX PX client's; legacy: the SETNX/GETSET expiry
timestamp protocol; foreign: some other string; shared: a read lock;
reentrant: a reentrant owner's hold; semaphore; not a lock: the key holds a
list, hash, ...), the holder, the handles' tokens of a shared, reentrant or
semaphore hold, the remaining TTL, the last fencing token granted, the
number of clients waiting, and dlock's auxiliary keys of the lock that exist
(fence counter, queue, hold sets, semaphore limit, ...).

Tokens are shown shortened (the first 6 characters): a token releases its
lock ('dlock release --token'), so it is not printed whole unless
--show-token is given. Keys and values that contain non-printable
characters are printed quoted, Go-style.

Flags:
  --json        one JSON object: key, state (held|free|not-a-lock), held, kind,
                value, tokens, ttl_ms (-1: no expiry), fence, waiters, holders,
                permits, limit, aux, and for legacy values legacy_unit and
                legacy_expires_at
  --show-token  print tokens whole (value, tokens)
  --redis URL, --prefix P, --tls-*   see 'dlock help'

Exit codes: 0 held, 3 free, 4 not a lock (also: KEY is one of dlock's
auxiliary keys), 2 usage, 125 bad URL or Redis unreachable.
`

const usageList = `Usage:
  dlock list [PATTERN] [--json] [--show-token]

Lists held locks of every kind, with the columns of 'dlock status'. Without
PATTERN: every key dlock locked recently (found by SCAN over dlock's fence
counters, never KEYS). With PATTERN (Redis glob: * ? [abc]): those matching
it, plus every key matching it that is a lock, so locks of other clients and
of the legacy protocol show too. A match that is one of dlock's auxiliary
keys (<prefix>:{...}:fence, :limit, ...) is shown as its lock, never as a
lock of its own. On a Cluster every master is scanned. Tokens are shortened
unless --show-token is given; keys and values with non-printable characters
are quoted.

Flags:
  --json        a JSON array of the objects 'dlock status --json' prints
  --show-token  print tokens whole
  --redis URL, --prefix P, --tls-*   see 'dlock help'

Exit codes: 0 some found, 3 none found, 2 usage, 125 bad URL or Redis unreachable.
`

const usageRelease = `Usage:
  dlock release KEY --token TOKEN
  dlock release KEY --force

--token: releases the hold of TOKEN on KEY (what DLOCK_TOKEN was for the
command, or a token 'dlock status --show-token' prints), as the holder's
own release would, for every kind of lock: a token lock is freed; one
handle of a shared (-s), reentrant or semaphore (--limit) hold is released,
the others keep theirs. Safe: nothing else releases anything (a reentrant
owner id is not a token).
--force: releases KEY whoever holds it (an operator's steal), for every
kind: a lock, all readers of a shared lock, all handles of a reentrant
hold, all holders of a semaphore; its waiters get it. The holders find out
at their next renewal; a 'dlock run' holder then terminates its command and
exits 124.

Either way, a key that is not a lock (a list, a hash, one of dlock's own
auxiliary keys) is left alone.

Flags:
  --redis URL, --prefix P, --tls-*   see 'dlock help'

Exit codes:
  0    released
  1    not released: KEY is held by another owner (--token did not match)
  3    not released: KEY is not held (free, or already expired)
  4    not released: KEY is not a lock (a non-string value, or dlock's own
       auxiliary key)
  2    usage error
  125  bad URL or Redis unreachable
`

// lockView is one lock as status and list show it.
type lockView struct {
	Key             string   `json:"key"`
	State           string   `json:"state"` // held, free, not-a-lock
	Held            bool     `json:"held"`
	Kind            string   `json:"kind,omitempty"`
	Value           string   `json:"value,omitempty"`  // shortened unless --show-token (tokens)
	Tokens          []string `json:"tokens,omitempty"` // handles of a shared, reentrant or semaphore hold
	TTLms           int64    `json:"ttl_ms"`
	Fence           uint64   `json:"fence"`
	Waiters         int64    `json:"waiters"`
	Holders         int64    `json:"holders,omitempty"` // readers of a shared lock, holders of a semaphore
	Permits         int64    `json:"permits,omitempty"` // semaphore permits in use
	Limit           int64    `json:"limit,omitempty"`   // semaphore limit set at run time
	Aux             []string `json:"aux,omitempty"`     // dlock's auxiliary keys of the lock that exist
	LegacyUnit      string   `json:"legacy_unit,omitempty"`
	LegacyExpiresAt string   `json:"legacy_expires_at,omitempty"`

	legacyExpiry time.Time
}

func viewOf(info admin.Info, showToken bool) lockView {
	v := lockView{Key: info.Key, Held: info.Held, Kind: string(info.Kind), Value: info.Value,
		Fence: info.Fence, Waiters: info.Queued + info.Subscribers,
		Holders: info.Holders, Permits: info.Permits, Limit: info.Limit,
		Tokens: slices.Clone(info.Tokens), Aux: info.Aux}
	if !showToken {
		if info.Kind == admin.KindToken || info.Kind == admin.KindForeign {
			v.Value = shortToken(v.Value)
		}
		for i, t := range v.Tokens {
			v.Tokens[i] = shortToken(t)
		}
	}
	switch {
	case info.Kind == admin.KindWrongType:
		v.State = "not-a-lock"
	case info.Held:
		v.State = "held"
	default:
		v.State = "free"
	}
	switch {
	case info.TTL < 0:
		v.TTLms = -1
	default:
		v.TTLms = info.TTL.Milliseconds()
	}
	if info.Kind == admin.KindLegacy {
		if n, err := strconv.ParseInt(info.Value, 10, 64); err == nil {
			// The legacy value is the expiry: seconds (10 digits today) or
			// milliseconds (13 digits). The lock can be taken over once the
			// clock passes it, that is one unit after it.
			if n > 1e11 {
				v.LegacyUnit, v.legacyExpiry = "ms", time.UnixMilli(n+1)
			} else {
				v.LegacyUnit, v.legacyExpiry = "s", time.Unix(n+1, 0)
			}
			v.LegacyExpiresAt = v.legacyExpiry.UTC().Format(time.RFC3339Nano)
		}
	}
	return v
}

func (v lockView) kindText() string {
	switch admin.Kind(v.Kind) {
	case admin.KindToken:
		return "token (SET NX PX: dlock or a compatible client)"
	case admin.KindLegacy:
		return "legacy (SETNX/GETSET expiry timestamp)"
	case admin.KindForeign:
		return "foreign (a string of some other client)"
	case admin.KindShared:
		return fmt.Sprintf("shared (read lock: %d readers)", v.Holders)
	case admin.KindReentrant:
		return fmt.Sprintf("reentrant (owner %s: %d handles)", printable(v.Value), v.Holders)
	case admin.KindSemaphore:
		limit := "limit given by each client"
		if v.Limit > 0 {
			limit = fmt.Sprintf("limit %d", v.Limit)
		}
		return fmt.Sprintf("semaphore (%d permits held by %d holders; %s)", v.Permits, v.Holders, limit)
	}
	return v.Kind
}

func (v lockView) ttlText() string {
	switch {
	case v.TTLms < 0:
		return "none (no expiry)"
	case !v.Held:
		return "-"
	}
	return (time.Duration(v.TTLms) * time.Millisecond).String()
}

func (a *app) cmdStatus(args []string) int {
	var asJSON bool
	fs := newFlagSet("status")
	a.globalFlags(fs)
	boolFlags(fs, &asJSON, "json")
	boolFlags(fs, &a.showToken, "show-token")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if isHelp(err) {
			return a.helpFor("status")
		}
		return a.usageErr("status", "status: %v", err)
	}
	if len(pos) != 1 || pos[0] == "" {
		return a.usageErr("status", "status: want exactly one KEY")
	}
	ctx := context.Background()
	adm, e, done, code := a.adminClient(ctx)
	if code != exitOK {
		return code
	}
	defer done()
	info, err := adm.Inspect(ctx, pos[0])
	if code, bad := a.badKey(adm, "status", pos[0], err); bad {
		return code
	}
	if err != nil {
		return a.redisFailed(e, "status", err)
	}
	v := viewOf(info, a.showToken)
	if asJSON {
		a.printJSON(v)
	} else {
		a.printStatus(v)
	}
	switch v.State {
	case "held":
		return exitOK
	case "not-a-lock":
		return exitNotLock
	}
	return exitFree
}

func (a *app) printStatus(v lockView) {
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	defer w.Flush()
	switch v.State {
	case "not-a-lock":
		fmt.Fprintf(w, "%s\tnot a lock (the key holds a non-string value)\n", printable(v.Key))
		return
	case "free":
		fmt.Fprintf(w, "%s\tfree\n", printable(v.Key))
		if v.Fence > 0 {
			fmt.Fprintf(w, "  fence\t%d (last granted)\n", v.Fence)
		}
		if v.Waiters > 0 {
			fmt.Fprintf(w, "  waiters\t%d\n", v.Waiters)
		}
		v.printAux(w)
		return
	}
	fmt.Fprintf(w, "%s\theld\n", printable(v.Key))
	fmt.Fprintf(w, "  protocol\t%s\n", v.kindText())
	if v.Kind != string(admin.KindSemaphore) {
		fmt.Fprintf(w, "  holder\t%s\n", printable(v.Value))
	}
	if len(v.Tokens) > 0 {
		toks := make([]string, len(v.Tokens))
		for i, t := range v.Tokens {
			toks[i] = printable(t)
		}
		fmt.Fprintf(w, "  tokens\t%s\n", strings.Join(toks, " "))
	}
	fmt.Fprintf(w, "  ttl\t%s\n", v.ttlText())
	if !v.legacyExpiry.IsZero() {
		left := time.Until(v.legacyExpiry)
		when := v.legacyExpiry.Local().Format("2006-01-02 15:04:05.000 MST")
		if left > 0 {
			fmt.Fprintf(w, "  expires\t%s (in %v, by this machine's clock; unit %s)\n", when, left.Round(time.Millisecond), v.LegacyUnit)
		} else {
			fmt.Fprintf(w, "  expires\t%s (%v ago: stale, the next locker takes it over; unit %s)\n", when, (-left).Round(time.Millisecond), v.LegacyUnit)
		}
	}
	if v.Fence > 0 {
		fmt.Fprintf(w, "  fence\t%d\n", v.Fence)
	} else {
		fmt.Fprintf(w, "  fence\t-\n")
	}
	fmt.Fprintf(w, "  waiters\t%d\n", v.Waiters)
	v.printAux(w)
}

func (v lockView) printAux(w io.Writer) {
	for i, name := range v.Aux {
		label := ""
		if i == 0 {
			label = "aux keys"
		}
		fmt.Fprintf(w, "  %s\t%s\n", label, printable(name))
	}
}

func (a *app) cmdList(args []string) int {
	var asJSON bool
	fs := newFlagSet("list")
	a.globalFlags(fs)
	boolFlags(fs, &asJSON, "json")
	boolFlags(fs, &a.showToken, "show-token")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if isHelp(err) {
			return a.helpFor("list")
		}
		return a.usageErr("list", "list: %v", err)
	}
	if len(pos) > 1 {
		return a.usageErr("list", "list: at most one PATTERN")
	}
	pattern := ""
	if len(pos) == 1 {
		pattern = pos[0]
	}
	ctx := context.Background()
	adm, e, done, code := a.adminClient(ctx)
	if code != exitOK {
		return code
	}
	defer done()
	views := []lockView{}
	err = adm.List(ctx, pattern, func(info admin.Info) bool {
		views = append(views, viewOf(info, a.showToken))
		return true
	})
	if err != nil {
		if errors.Is(err, dlock.ErrInvalidArgument) {
			return a.usageErr("list", "list: bad PATTERN %s: %s", printable(pattern), libMsg(err))
		}
		return a.redisFailed(e, "list", err)
	}
	if asJSON {
		a.printJSON(views)
	} else if len(views) > 0 {
		w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "KEY\tPROTOCOL\tHOLDER\tTTL\tFENCE\tWAITERS")
		for _, v := range views {
			fence := "-"
			if v.Fence > 0 {
				fence = strconv.FormatUint(v.Fence, 10)
			}
			holder := v.Value
			switch {
			case v.State == "free":
				holder = "-"
			case v.Kind == string(admin.KindSemaphore):
				holder = fmt.Sprintf("%d holders", v.Holders)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\n", printable(v.Key), v.Kind, short(printable(holder)), v.ttlText(), fence, v.Waiters)
		}
		w.Flush()
	}
	if len(views) == 0 {
		if !asJSON {
			fmt.Fprintln(a.stderr, "dlock: no locks found")
		}
		return exitFree
	}
	return exitOK
}

// short shortens a holder value for the list's column.
func short(s string) string {
	if r := []rune(s); len(r) > 12 {
		return string(r[:10]) + "…"
	}
	return s
}

func (a *app) cmdRelease(args []string) int {
	var token string
	var force bool
	fs := newFlagSet("release")
	a.globalFlags(fs)
	stringFlags(fs, &token, "token")
	boolFlags(fs, &force, "force", "f")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if isHelp(err) {
			return a.helpFor("release")
		}
		return a.usageErr("release", "release: %v", err)
	}
	switch {
	case len(pos) != 1 || pos[0] == "":
		return a.usageErr("release", "release: want exactly one KEY")
	case force == (token != ""):
		return a.usageErr("release", "release: give either --token TOKEN or --force")
	}
	key := pos[0]
	ctx := context.Background()
	adm, e, done, code := a.adminClient(ctx)
	if code != exitOK {
		return code
	}
	defer done()
	k := printable(key)
	if force {
		deleted, err := adm.ForceRelease(ctx, key)
		if code, bad := a.badKey(adm, "release", key, err); bad {
			return code
		}
		switch {
		case errors.Is(err, dlock.ErrWrongType):
			a.errorf("release: %s; left alone", notALock(ctx, adm, key, false))
			return exitNotLock
		case err != nil:
			return a.redisFailed(e, "release", err)
		case !deleted:
			a.errorf("release: %s is not held; nothing to release", k)
			return exitFree
		}
		fmt.Fprintf(a.stdout, "released %s (forced; its holders find out at their next renewal)\n", k)
		return exitOK
	}
	err = adm.ReleaseToken(ctx, key, token)
	if code, bad := a.badKey(adm, "release", key, err); bad {
		return code
	}
	switch {
	case err == nil:
		fmt.Fprintf(a.stdout, "released %s\n", k)
		return exitOK
	case errors.Is(err, dlock.ErrWrongType):
		a.errorf("release: %s; left alone", notALock(ctx, adm, key, false))
		return exitNotLock
	case errors.Is(err, dlock.ErrTaken):
		a.errorf("release: %s is held by another owner (the token does not match); not released", k)
		return exitNotAcquired
	case errors.Is(err, dlock.ErrExpired), errors.Is(err, dlock.ErrNotHeld):
		a.errorf("release: %s is not held (free, or its TTL ran out); nothing to release", k)
		return exitFree
	}
	return a.redisFailed(e, "release", err)
}

// adminClient connects for status, list and release. done closes the
// connection.
func (a *app) adminClient(ctx context.Context) (*admin.Client, *endpoint, func(), int) {
	e, rdb, code := a.connect(ctx, a.target())
	if code != exitOK {
		return nil, nil, nil, code
	}
	adm, err := admin.New(rdb, admin.Options{Prefix: a.prefix})
	if err != nil {
		_ = rdb.Close()
		a.errorf("%v", err)
		return nil, nil, nil, exitFailed
	}
	return adm, e, func() { _ = rdb.Close() }, exitOK
}

// electionClient connects for leader and observe. done closes both
// clients and the connection.
func (a *app) electionClient(ctx context.Context) (*dlock.Client, *admin.Client, *endpoint, func(), int) {
	e, rdb, code := a.connect(ctx, a.target())
	if code != exitOK {
		return nil, nil, nil, nil, code
	}
	// Warnings (an observer that cannot read, for one) go to stderr.
	opts := dlock.Options{Logger: slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(_ []string, at slog.Attr) slog.Attr {
			if at.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return at
		},
	}))}
	if a.prefix != "" {
		opts.Prefix = a.prefix
	}
	c, err := dlock.New(rdb, opts)
	if err != nil {
		_ = rdb.Close()
		a.errorf("%v", err)
		return nil, nil, nil, nil, exitFailed
	}
	adm, err := adminOf(rdb, c)
	if err != nil {
		_ = c.Close()
		_ = rdb.Close()
		a.errorf("%v", err)
		return nil, nil, nil, nil, exitFailed
	}
	return c, adm, e, func() { _ = c.Close(); _ = rdb.Close() }, exitOK
}

// adminOf returns the admin Client for the locks of c, a Client over rdb.
func adminOf(rdb redis.UniversalClient, c *dlock.Client) (*admin.Client, error) {
	o := c.Options()
	return admin.New(rdb, admin.Options{Prefix: o.Prefix, PickupTimeout: o.PickupTimeout})
}

func (a *app) redisFailed(e *endpoint, cmd string, err error) int {
	a.errorf("%s: Redis at %s failed: %s", cmd, e.where(), libMsg(err))
	return exitFailed
}

// badKey reports a key the library refused before any Redis call: one of
// dlock's auxiliary keys (exit 4: not a lock), or bad input such as a key
// over the length limit (exit 2). bad is false for any other err.
func (a *app) badKey(adm *admin.Client, cmd, key string, err error) (int, bool) {
	switch {
	case errors.Is(err, dlock.ErrReservedKey):
		lock, kind, _ := adm.AuxKeyOf(key)
		a.errorf("%s: %s is the %s key of lock %s, not a lock; left alone (see 'dlock status %s')",
			cmd, printable(key), kind, printable(lock), printable(lock))
		return exitNotLock, true
	case errors.Is(err, dlock.ErrKeyTooLong):
		return a.usageErr(cmd, "%s: KEY is %d bytes; the limit is %d", cmd, len(key), keyrules.MaxKeyLength), true
	case errors.Is(err, dlock.ErrInvalidArgument):
		return a.usageErr(cmd, "%s: %s", cmd, libMsg(err)), true
	}
	return 0, false
}

func (a *app) printJSON(v any) {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
