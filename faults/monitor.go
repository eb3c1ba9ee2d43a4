package faults

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/probe"
)

// monitor records every command a Redis server executes, through the
// MONITOR command, including the commands scripts run ("lua" lines), on the
// suite's time base. It is the server-side view R1, L3 and L4 are checked
// on. If the connection breaks (the server was killed or restarted), it
// reconnects and marks the gap: the key states before it are unknown.
type monitor struct {
	addr  string
	clock *timeBase

	mu    sync.Mutex
	lines []monLine
	conn  net.Conn
	seen  map[string]chan struct{} // sync markers awaited by Sync
	stop  bool

	done chan struct{}
}

// monLine is one command as MONITOR reports it.
type monLine struct {
	// T is the server's timestamp, on the suite's base. An EVAL, EVALSHA
	// or FCALL is stamped before its script runs, any other command (a script's
	// too) once it ran.
	T    int64
	Unix int64    // the same timestamp, Unix ns (0: not known)
	Lua  bool     // run by a script (the script is the last non-Lua line)
	Addr string   // the client's address ("lua" for script commands)
	Args []string // the command and its arguments
	Gap  bool     // the connection broke before this line: commands may be missing
	// Unparsed is the raw text of a line that could not be parsed (Args
	// is empty then): a command the replay cannot see.
	Unparsed string
}

// startMonitor connects to addr and starts recording. Commands the server
// executes after startMonitor returns are recorded.
func startMonitor(addr string, clock *timeBase) (*monitor, error) {
	m := &monitor{addr: addr, clock: clock, seen: map[string]chan struct{}{}, done: make(chan struct{})}
	c, r, err := m.dial()
	if err != nil {
		return nil, err
	}
	m.conn = c
	go m.loop(r)
	return m, nil
}

func (m *monitor) dial() (net.Conn, *bufio.Reader, error) {
	c, err := net.DialTimeout("tcp", m.addr, time.Second)
	if err != nil {
		return nil, nil, err
	}
	r := bufio.NewReaderSize(c, 1<<16)
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
		c.Close()
		return nil, nil, err
	}
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "+OK") {
		c.Close()
		return nil, nil, fmt.Errorf("faults: MONITOR on %s: %q %v", m.addr, line, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, r, nil
}

func (m *monitor) loop(r *bufio.Reader) {
	defer close(m.done)
	gap := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			m.mu.Lock()
			stop := m.stop
			m.mu.Unlock()
			if stop {
				return
			}
			// Reconnect until the server is back or Stop is called.
			for {
				time.Sleep(10 * time.Millisecond)
				m.mu.Lock()
				stop := m.stop
				m.mu.Unlock()
				if stop {
					return
				}
				c, nr, err := m.dial()
				if err != nil {
					continue
				}
				m.mu.Lock()
				if m.stop {
					m.mu.Unlock()
					c.Close()
					return
				}
				m.conn, r = c, nr
				m.mu.Unlock()
				gap = true
				break
			}
			continue
		}
		m.take(strings.TrimRight(line, "\r\n"), gap)
		gap = false
	}
}

// take records one line MONITOR sent (gap: the connection broke before
// it). A line that does not parse is recorded as such (Unparsed), on the
// time of the line before it: the replay cannot know what it did, and the
// report counts it.
func (m *monitor) take(raw string, gap bool) {
	l, ok := parseMonitorLine(raw, m.clock)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !ok {
		l = monLine{Unparsed: raw}
		if n := len(m.lines); n > 0 {
			l.T = m.lines[n-1].T
		}
	}
	l.Gap = gap
	m.lines = append(m.lines, l)
	if len(l.Args) == 2 && strings.EqualFold(l.Args[0], "echo") {
		if ch := m.seen[l.Args[1]]; ch != nil {
			close(ch)
			delete(m.seen, l.Args[1])
		}
	}
}

var syncSeq struct {
	sync.Mutex
	n int
}

// Sync waits until the monitor has read every command the server executed
// before the call (it sends an ECHO marker and waits for it), at most
// timeout. It reports whether the marker arrived.
func (m *monitor) Sync(timeout time.Duration) bool {
	syncSeq.Lock()
	syncSeq.n++
	mark := fmt.Sprintf("faults-monitor-sync-%d-%d", time.Now().UnixNano(), syncSeq.n)
	syncSeq.Unlock()
	ch := make(chan struct{})
	m.mu.Lock()
	m.seen[mark] = ch
	m.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", m.addr, 200*time.Millisecond)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
			_, err = fmt.Fprintf(c, "*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", len(mark), mark)
			if err == nil {
				_, err = bufio.NewReader(c).ReadString('\n')
			}
			c.Close()
		}
		if err == nil {
			select {
			case <-ch:
				return true
			case <-time.After(time.Until(deadline)):
				return false
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// Stop syncs, stops recording and returns every line recorded.
func (m *monitor) Stop() []monLine {
	m.Sync(2 * time.Second)
	m.mu.Lock()
	m.stop = true
	if m.conn != nil {
		m.conn.Close()
	}
	m.mu.Unlock()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lines
}

// parseMonitorLine parses `+<sec>.<usec> [<db> <addr>] "arg" "arg"...`.
func parseMonitorLine(s string, clock *timeBase) (monLine, bool) {
	s, _ = strings.CutPrefix(s, "+")
	ts, rest, ok := strings.Cut(s, " [")
	if !ok {
		return monLine{}, false
	}
	sec, usec, ok := strings.Cut(ts, ".")
	if !ok {
		return monLine{}, false
	}
	si, err1 := strconv.ParseInt(sec, 10, 64)
	ui, err2 := strconv.ParseInt(usec, 10, 64)
	if err1 != nil || err2 != nil {
		return monLine{}, false
	}
	client, argStr, ok := strings.Cut(rest, "] ")
	if !ok {
		return monLine{}, false
	}
	_, addr, _ := strings.Cut(client, " ")
	args, err := splitQuoted(argStr)
	if err != nil || len(args) == 0 {
		return monLine{}, false
	}
	unix := si*1e9 + ui*1e3
	return monLine{T: clock.Wall(unix), Unix: unix, Lua: addr == "lua", Addr: addr, Args: args}, true
}

// splitQuoted splits MONITOR's argument list: double-quoted strings in the
// escaping of Redis's sdscatrepr (\\ \" \n \r \t \a \b \xHH), separated by
// spaces.
func splitQuoted(s string) ([]string, error) {
	var out []string
	for i := 0; i < len(s); {
		if s[i] == ' ' {
			i++
			continue
		}
		if s[i] != '"' {
			return nil, errors.New("unquoted argument")
		}
		i++
		var b strings.Builder
		closed := false
		for i < len(s) {
			c := s[i]
			if c == '"' {
				closed = true
				i++
				break
			}
			if c != '\\' || i+1 >= len(s) {
				b.WriteByte(c)
				i++
				continue
			}
			switch e := s[i+1]; e {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+3 < len(s) {
					if v, err := strconv.ParseUint(s[i+2:i+4], 16, 8); err == nil {
						b.WriteByte(byte(v))
						i += 4
						continue
					}
				}
				b.WriteByte('x')
			default:
				b.WriteByte(e)
			}
			i += 2
		}
		if !closed {
			return nil, errors.New("unterminated argument")
		}
		out = append(out, b.String())
	}
	return out, nil
}

// monStats is what the server-side view shows.
type monStats struct {
	Commands int      // top-level commands in the counting window
	Foreign  int      // R1: writes to a lock key held by another owner's live token
	Details  []string // the first few foreign writes and orphans
	Orphans  []orphan // values a script set for tokens no grant returned
	Gaps     int      // connection gaps (restarts)
	Unparsed int      // lines that could not be parsed (see monLine.Unparsed)
}

// orphan is a lock key holding the token of a grant nobody received: an
// acquire whose reply was lost, or a hand-off to a waiter that never
// confirmed it. It lasts until it is deleted, overwritten or expires.
type orphan struct {
	Key   string
	Token string
	Start int64
	Dur   int64
}

// liveSlack absorbs the millisecond expiry arithmetic of Redis: within it
// of a key's expiry, whether the key was live is not decided.
const liveSlack = int64(2 * time.Millisecond)

// keyState is what the replay knows of a lock key. Its expiry is known
// within [exp, expHi]: Redis bases a PX or PEXPIRE in a script on a time
// between the script's MONITOR line (the replay's time for it) and the
// command's own line (fed once the command ran; see when); a server
// stalled inside a script widens the interval.
type keyState struct {
	known  bool
	value  string // "" absent
	exp    int64  // 0: no expiry; else the earliest it expires
	expHi  int64  // the latest it expires
	since  int64
	script bool // set by a script
}

// live reports whether the key surely holds its value at t.
func (k *keyState) live(t int64) bool {
	return k.known && k.value != "" && (k.exp == 0 || t < k.exp-liveSlack)
}

// expired reports whether the key's value surely expired before t.
func (k *keyState) expired(t int64) bool {
	return k.known && k.value != "" && k.exp != 0 && t > k.expHi+liveSlack
}

// recentLines is how many of the latest commands on a lock key an R1
// detail quotes.
const recentLines = 12

// analyzeMonitor replays the lines for the lock keys in keys. owned holds
// every token a grant returned. Commands are counted between from and to.
//
// R1: a script run for token T (its ARGV[1], the convention of every dlock
// script; a bulk script carries many: extend_many lock i's key in KEYS[i]
// and its token in ARGV[2+i], release_many lock i's key in KEYS[4i-3] and
// its token in ARGV[3i-2]) that writes a lock key (SET,
// DEL, PEXPIRE, ...) while the key holds another token whose TTL has not
// run out is a foreign write: release or extend touching another owner, or
// an acquire overwriting a live lock. ForceRelease ('force') is exempt.
// A command sent outside any script that writes a lock key while it holds
// a live token with a Redis expiry is one too (see foreignTopLevel).
//
// A script's clock: Redis feeds MONITOR an EVALSHA (or an FCALL) before
// the script runs and each command of the script after it ran, and the
// script judges expiry by a snapshot of the clock taken in between
// (before its first command). A key is foreign-written only if it was surely live at that
// snapshot: live at the time of the script's first command's line. (A
// server descheduled between the EVALSHA's line and the script's start
// runs the script later than the line says: a key that expired meanwhile
// is free to it.) Each R1 detail quotes the latest commands on its key,
// with their own times.
func analyzeMonitor(lines []monLine, keys, owned map[string]bool, from, to int64) monStats {
	var st monStats
	states := map[string]*keyState{}
	gapped := false // commands may be missing: a key first seen now is unknown
	state := func(k string) *keyState {
		s := states[k]
		if s == nil {
			s = &keyState{known: !gapped} // keys are fresh per history
			states[k] = s
		}
		return s
	}
	// recent holds, per lock key, the latest lines on it (indexes into
	// lines) and the line of the script each ran in (-1: none).
	type seen struct{ line, script int }
	recent := map[string][]seen{}
	note := func(k string, i, scr int) {
		r := append(recent[k], seen{i, scr})
		if len(r) > 2*recentLines {
			r = append(r[:0], r[len(r)-recentLines:]...)
		}
		recent[k] = r
	}
	quote := func(k string) string {
		r := recent[k]
		r = r[max(0, len(r)-recentLines):]
		var b strings.Builder
		b.WriteString("; the latest commands on it:")
		for _, e := range r {
			b.WriteString("\n      ")
			b.WriteString(describeLine(lines[e.line]))
			if e.script >= 0 && lines[e.line].Lua {
				fmt.Fprintf(&b, " (script of %s)", dur(lines[e.script].T))
			}
		}
		return b.String()
	}
	endTenure := func(k string, s *keyState, t int64) {
		if !s.known || s.value == "" || !s.script || owned[s.value] {
			return
		}
		end := t
		if s.exp != 0 && s.exp < end {
			end = s.exp
		}
		if stamp, ok := legacyStamp(s.value, lines); ok && s.exp == 0 && stamp < end {
			// The legacy lock's validity is the stamp in its value (no
			// Redis expiry): a taker may overwrite it from then on.
			end = max(stamp, s.since)
		}
		st.Orphans = append(st.Orphans, orphan{Key: k, Token: short(s.value), Start: s.since, Dur: end - s.since})
	}
	detail := func(f string, a ...any) {
		if len(st.Details) < 8 {
			st.Details = append(st.Details, fmt.Sprintf(f, a...))
		}
	}
	var script struct {
		active bool
		line   int   // its EVALSHA's index in lines
		t      int64 // its EVALSHA's line: before it ran
		first  int64 // its first command's line: after its clock snapshot
		token  string
		tokens map[string]string // a bulk script's token of each lock key
		force  bool
	}
	last := int64(0)
	for i, l := range lines {
		last = l.T
		if l.Gap {
			st.Gaps++
		}
		if l.Unparsed != "" {
			// A command nobody can read: from here on the keys are
			// unknown, as after a gap.
			st.Unparsed++
			detail("monitor: a line could not be parsed, key states unknown after %s: %q", dur(l.T), cut(l.Unparsed, 120))
		}
		if l.Gap || l.Unparsed != "" {
			gapped = true
			for _, s := range states {
				s.known = false
			}
		}
		if l.Unparsed != "" {
			script.active = false
			continue
		}
		cmd := strings.ToUpper(l.Args[0])
		t := l.T
		if !l.Lua {
			script.active = false
			if l.T >= from && l.T <= to && cmd != "ECHO" {
				st.Commands++
			}
			switch cmd {
			case "EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO", "FCALL", "FCALL_RO":
				if len(l.Args) < 3 {
					continue
				}
				n, err := strconv.Atoi(l.Args[2])
				if err != nil || 3+n > len(l.Args) {
					continue
				}
				argv := l.Args[3+n:]
				script.active, script.line, script.t, script.first = true, i, l.T, 0
				script.token, script.tokens, script.force = "", nil, false
				if len(argv) > 0 {
					script.token = argv[0]
				}
				switch bulkScript(cmd, l.Args[1]) {
				case "extend_many":
					ks := l.Args[3 : 3+n]
					script.tokens = map[string]string{}
					for i := 0; i < len(ks) && 2+i < len(argv); i++ {
						script.tokens[ks[i]] = argv[2+i]
					}
				case "release_many":
					ks := l.Args[3 : 3+n]
					script.tokens = map[string]string{}
					for i := 0; 4*i < len(ks) && 3*i < len(argv); i++ {
						script.tokens[ks[4*i]] = argv[3*i]
					}
				}
				if len(argv) > 3 && argv[3] == "force" {
					script.force = true
				}
				for _, k := range l.Args[3 : 3+n] {
					if keys[k] {
						note(k, i, -1)
					}
				}
				continue
			case "FLUSHALL", "FLUSHDB":
				for k, s := range states {
					endTenure(k, s, t)
					*s = keyState{known: true}
				}
				continue
			}
		} else if script.active {
			t = script.t // a script sees the time it started at
			if script.first == 0 {
				script.first = l.T
			}
		} else {
			continue
		}
		if len(l.Args) < 2 || !keys[l.Args[1]] {
			continue
		}
		k := l.Args[1]
		s := state(k)
		scr := -1
		if l.Lua {
			scr = script.line
		}
		note(k, i, scr)
		if !isWrite(cmd) {
			continue
		}
		token := script.token
		if tk, ok := script.tokens[k]; ok {
			token = tk
		}
		// A SET NX on a live key writes nothing: not a foreign write.
		if l.Lua && !script.force && s.live(script.first) && s.value != token && !setNX(cmd, l.Args) {
			st.Foreign++
			detail("R1: %s %s by a script of token %s (sent %s, running by %s) while it held %s (expiring in %s)%s",
				cmd, k, short(token), dur(script.t), dur(script.first), short(s.value), dur(s.exp-script.first), quote(k))
		}
		if !l.Lua && foreignTopLevel(s, cmd, l) {
			st.Foreign++
			detail("R1: top-level %s %s by client %s at %s while it held %s (expiring in %s)%s",
				cmd, k, l.Addr, dur(l.T), short(s.value), dur(s.exp-l.T), quote(k))
		}
		w := when{lo: t, hi: t, base: t, line: l.T}
		if l.Lua {
			// Redis 7.0 bases a PX on its clock when the command runs,
			// Valkey 8 and Redis 7.2+ on the script's time snapshot: the
			// script's start is the earliest of both.
			w.hi, w.base = script.first, script.t
		}
		applyWrite(k, s, cmd, l.Args, w, l.Lua, endTenure)
	}
	for k, s := range states {
		endTenure(k, s, last)
	}
	return st
}

// legacyStamp returns, on the suite's base, the expiry a legacy lock's
// value v states (Unix milliseconds, or seconds for ten digits or fewer),
// converted by the first line whose Unix time is known; ok is false if v
// is no stamp or no line has one.
func legacyStamp(v string, lines []monLine) (int64, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || len(v) > 13 {
		return 0, false
	}
	ns := n * int64(time.Millisecond)
	if len(v) <= 10 {
		ns = n * int64(time.Second)
	}
	for _, l := range lines {
		if l.Unix != 0 {
			return ns - (l.Unix - l.T), true
		}
	}
	return 0, false
}

// foreignTopLevel reports whether l, a command sent outside any script,
// writes a lock key that surely held a live token when it ran. A script
// carries its token; a top-level command carries none, so it is nobody's
// release or renewal. The command ran before its line (MONITOR feeds it
// once it ran), so a key live at the line was live when it ran. A SET NX
// or SETNX on a live key writes nothing. Keys without a Redis expiry are
// left out: their validity is in their value (the legacy protocol's
// timestamps, whose top-level GETSET takes over an expired stamp), which
// the replay does not judge.
func foreignTopLevel(s *keyState, cmd string, l monLine) bool {
	return s.live(l.T) && s.exp != 0 && !setNX(cmd, l.Args) && cmd != "SETNX"
}

// setNX reports whether args are a SET with the NX option (it writes only
// a key that does not exist).
func setNX(cmd string, args []string) bool {
	if cmd != "SET" {
		return false
	}
	for _, a := range args[min(3, len(args)):] {
		if strings.EqualFold(a, "NX") {
			return true
		}
	}
	return false
}

// bulkScript returns the name of the dlock bulk script, which carries many
// locks (see analyzeMonitor), that an EVAL (source), EVALSHA (sha) or
// FCALL (function) call runs, or "".
func bulkScript(cmd, script string) string {
	name := probe.ScriptName(script)
	if cmd == "EVAL" || cmd == "EVAL_RO" {
		name = probe.ScriptNameOfSource(script)
	}
	if strings.HasSuffix(name, "_many") {
		return name
	}
	return ""
}

func isWrite(cmd string) bool {
	switch cmd {
	case "SET", "DEL", "UNLINK", "GETDEL", "GETSET", "SETEX", "PSETEX", "PEXPIRE", "EXPIRE",
		"PEXPIREAT", "EXPIREAT", "PERSIST", "GETEX", "RENAME", "SETNX", "MSET":
		return true
	}
	return false
}

// when places a write in time: Redis judged the key's expiry at a moment
// in [lo, hi] (a script's clock snapshot; for a top-level command lo = hi,
// its line), and based a PX or PEXPIRE on a time in [base, line]: its
// clock when the command ran (Redis 7.0; before its own line, as MONITOR
// feeds a command's line once it ran), or the script's time snapshot
// (Valkey 8, Redis 7.2+), so base is the script's start (an EVALSHA's line
// is fed before the script runs).
type when struct{ lo, hi, base, line int64 }

func applyWrite(k string, s *keyState, cmd string, args []string, w when, script bool, endTenure func(string, *keyState, int64)) {
	if s.expired(w.lo) {
		// It expired before this command.
		endTenure(k, s, w.lo)
		s.value, s.exp, s.expHi = "", 0, 0
	}
	// Whether the key held its value when the command ran is uncertain:
	// it may have expired between lo and hi.
	uncertain := !s.known || (s.value != "" && s.exp != 0 && !s.live(w.hi))
	ttl := func(arg, unit string) (int64, int64, bool) {
		n, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		u := int64(time.Millisecond)
		if strings.EqualFold(unit, "EX") || strings.EqualFold(unit, "EXPIRE") {
			u = int64(time.Second)
		}
		return w.base + n*u, w.line + n*u, n > 0
	}
	switch cmd {
	case "SET":
		if len(args) < 3 {
			s.known = false
			return
		}
		var exp, expHi int64
		nx, xx, keep := false, false, false
		for i := 3; i < len(args); i++ {
			switch strings.ToUpper(args[i]) {
			case "PX", "EX":
				if i+1 < len(args) {
					exp, expHi, _ = ttl(args[i+1], args[i])
					i++
				}
			case "NX":
				nx = true
			case "XX":
				xx = true
			case "KEEPTTL":
				keep = true
			default:
				if u := strings.ToUpper(args[i]); u == "PXAT" || u == "EXAT" {
					s.known = false
					return
				}
			}
		}
		if nx || xx || keep {
			if uncertain {
				s.known = false
				return
			}
			held := s.value != ""
			if (nx && held) || (xx && !held) {
				return
			}
			if keep && held {
				exp, expHi = s.exp, s.expHi
			}
		}
		endTenure(k, s, w.lo)
		*s = keyState{known: true, value: args[2], exp: exp, expHi: expHi, since: w.lo, script: script}
	case "DEL", "UNLINK", "GETDEL":
		endTenure(k, s, w.lo)
		*s = keyState{known: true}
	case "PEXPIRE", "EXPIRE":
		if len(args) < 3 || uncertain {
			s.known = false
			return
		}
		if s.value == "" {
			return
		}
		exp, expHi, ok := ttl(args[2], cmd)
		gt := len(args) == 4 && strings.EqualFold(args[3], "GT")
		if len(args) > 3 && !gt {
			s.known = false // NX, XX, LT: not sent by dlock
			return
		}
		if gt {
			// GT: only a later expiry is set; a key without a TTL keeps
			// none, and a non-positive TTL (earlier than any) does nothing.
			if s.exp == 0 || !ok {
				return
			}
			s.exp, s.expHi = max(s.exp, exp), max(s.expHi, expHi)
			return
		}
		if !ok {
			endTenure(k, s, w.lo)
			*s = keyState{known: true}
			return
		}
		s.exp, s.expHi = exp, expHi
	default:
		s.known = false
	}
}

// describeLine formats a MONITOR line for a report: its time, its client
// ("lua" for a script's command), the command with the script's name for
// an EVAL, EVALSHA or FCALL, and its arguments, long ones cut to their end.
func describeLine(l monLine) string {
	var b strings.Builder
	b.WriteString(dur(l.T))
	if l.Lua {
		b.WriteString("   lua")
	} else {
		b.WriteString(" " + l.Addr)
	}
	for i, a := range l.Args {
		if i == 1 {
			switch strings.ToUpper(l.Args[0]) {
			case "EVALSHA", "EVALSHA_RO", "FCALL", "FCALL_RO":
				if n := probe.ScriptName(a); n != "" {
					a = n
				}
			case "EVAL", "EVAL_RO":
				if n := probe.ScriptNameOfSource(a); n != "" {
					a = n
				}
			}
		}
		if len(a) > 40 {
			a = "…" + a[len(a)-28:]
		}
		b.WriteString(" " + a)
	}
	return b.String()
}

// cut shortens s to at most n bytes for a report, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
