// Package faultcmd is a command-level fault layer for tests: a go-redis v9
// hook that makes single commands on the client's own connections fail in
// the ways a network and a busy machine make them fail, and records what it
// did.
//
//	inj := faultcmd.New()
//	rdb.AddHook(inj)                          // any go-redis client, before use
//	inj.Add(faultcmd.Rule{Name: "lost grant", Action: faultcmd.DropReply,
//		Match: faultcmd.Match{Script: "acquire", Key: "k"}})
//	...
//	for _, e := range inj.Log() { t.Log(e) }
//
// # Actions
//
//   - DropReply: the command runs on the server, then its reply is replaced
//     by an error matching ErrDropped. The error is a net.Error with
//     Timeout() true and is not a Redis error reply, so dlock classifies
//     it as ambiguous (the command may have run), as it would a read
//     timeout or a connection reset after the write.
//   - FailBefore: the command is not sent; the caller gets Rule.Err, by
//     default an error matching ErrFailed that is a Redis error reply
//     (it implements redis.Error), so dlock classifies it as definite: the
//     command certainly did not run. Set Rule.Err to, for example, an
//     io.ErrUnexpectedEOF to model a failure dlock cannot tell apart from a
//     lost reply.
//   - Delay: the command is sent after Rule.Delay (or a uniform random delay
//     up to Random.MaxDelay), or fails with the context's error if the
//     caller's context ends first (not sent).
//   - Hold: the command is held until a command matching Rule.Until has
//     completed (its reply arrived) after the hold began, or Rule.HoldTimeout
//     (default 10 s) passed; then it is sent. Commands run on pooled
//     connections, so this reorders two commands across connections: "the
//     withdraw reaches Redis after the retry".
//   - Late: the caller gets an error matching ErrDropped at once, and the
//     command is sent afterwards, in the background: after Rule.Delay, or
//     once a command matching Rule.Until has completed (at most
//     Rule.HoldTimeout). This is a command delayed, not lost, that lands
//     after the caller gave up on it (and after its clean-up). Its reply
//     is recorded in the log.
//   - Observe: nothing; the rule only counts, logs and closes FiredC (to
//     wait for a command in a test).
//
// In a pipeline (the watchdog's renewal batches) each command is matched
// on its own: FailBefore at command i sends the commands before i and fails
// i and every later one; DropReply at command i runs the whole pipeline and
// replaces the replies of i and every later one (the reply stream broke
// there); Delay and Hold hold the whole pipeline. The DialHook applies
// FailBefore and Delay rules whose Match.Cmd is "dial" to new connections
// (Args: network, address).
//
// # Matching
//
// A Rule fires on the commands its Match selects, starting at the Nth
// match (Rule.Nth, default 1), Rule.Times times (default 1; negative:
// every match from the Nth on). Rules are tried in the order they were
// added; the first that fires on a command acts on it. Match.Script
// selects EVAL/EVALSHA calls of a script, and FCALLs of its function, by
// the name dlock's packages record with probe.NameScript (for dlock:
// "acquire", "release", "extend", "semaphore_acquire", ... the script
// file names without .lua) or by its SHA1 (an FCALL: its function's name); for scripts, Key is KEYS[1]. DropReply rules are matched
// when the reply arrives, and a NOSCRIPT reply (which go-redis follows with
// an EVAL of the same script), or an FCALL's "Function not found" (which
// dlock follows with FUNCTION LOAD and the FCALL again), is not counted, so "the first acquire" means
// the first that ran.
//
// A Random schedule (SetRandom) applies, to every command its Match selects
// that no rule fired on, DropReply, FailBefore or Delay with the given
// probabilities, drawn from a generator seeded with Random.Seed: the same
// seed and the same sequence of commands give the same faults.
//
// # Log
//
// Every action taken is recorded as an Event (Log, Events), with the rule's
// name ("random" for the schedule), the command and the outcome, for test
// reports. The log keeps the last MaxLog events (default 100,000).
//
// All methods are safe for concurrent use. The Injector stays attached to
// the client; Clear removes every rule and the schedule.
package faultcmd

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/redis/go-redis/v9"
)

// Action is what a rule does to the commands it fires on.
type Action int

const (
	// DropReply runs the command, then replaces its reply by an error
	// matching ErrDropped (ambiguous to the caller).
	DropReply Action = iota + 1
	// FailBefore fails the command without sending it (by default with an
	// error matching ErrFailed, a Redis error reply: definite).
	FailBefore
	// Delay sends the command after a delay.
	Delay
	// Hold sends the command once a command matching Rule.Until completed.
	Hold
	// Late fails the command at once (ErrDropped) and sends it later.
	Late
	// Observe only records the command.
	Observe
)

func (a Action) String() string {
	switch a {
	case DropReply:
		return "drop-reply"
	case FailBefore:
		return "fail-before"
	case Delay:
		return "delay"
	case Hold:
		return "hold"
	case Late:
		return "late"
	case Observe:
		return "observe"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// ErrDropped matches the error a DropReply action returns.
var ErrDropped = errors.New("faultcmd: reply dropped after the command ran")

// ErrFailed matches the default error of a FailBefore action.
var ErrFailed = errors.New("faultcmd: command failed before it was sent")

// droppedError is a lost reply: a timeout, not a Redis error reply.
type droppedError struct{ cmd string }

func (e *droppedError) Error() string {
	return "faultcmd: i/o timeout: reply to " + e.cmd + " dropped (the command ran)"
}
func (e *droppedError) Timeout() bool        { return true }
func (e *droppedError) Temporary() bool      { return true }
func (e *droppedError) Is(target error) bool { return target == ErrDropped }

var _ net.Error = (*droppedError)(nil)

// failedError is a definite failure: it looks like a Redis error reply.
type failedError struct{ cmd string }

func (e *failedError) Error() string {
	return "ERR faultcmd: " + e.cmd + " failed before it was sent"
}
func (e *failedError) RedisError()          {}
func (e *failedError) Is(target error) bool { return target == ErrFailed }

var _ redis.Error = (*failedError)(nil)

// Match selects commands. Every non-zero field must match.
type Match struct {
	// Cmd is the command name, case-insensitive ("set", "evalsha", "dial").
	Cmd string
	// Script is a script's recorded name (probe.NameScript) or SHA1:
	// matches EVAL, EVALSHA and their _RO forms of that script, and the
	// FCALL (FCALL_RO) of its function (by the recorded name, or the
	// function's name).
	Script string
	// Key is the command's first key (a script's KEYS[1]), exactly.
	Key string
	// KeyPrefix: the first key starts with it.
	KeyPrefix string
	// Arg: some argument after the command name equals it (its fmt.Sprint
	// form), e.g. a lock token.
	Arg string
	// Func, if set, must return true.
	Func func(Command) bool
}

// IsZero reports whether m matches every command.
func (m Match) IsZero() bool {
	return m.Cmd == "" && m.Script == "" && m.Key == "" && m.KeyPrefix == "" && m.Arg == "" && m.Func == nil
}

// Command describes one command as the rules see it.
type Command struct {
	Name     string // lower case: "set", "evalsha", "dial"
	Script   string // script name, else SHA1 (EVAL/EVALSHA) or function name (FCALL), else ""
	Key      string // first key, else ""
	Args     []any  // every argument, the name first
	Pipeline bool   // sent in a pipeline
}

func (c Command) String() string {
	var b strings.Builder
	b.WriteString(c.Name)
	if c.Script != "" {
		b.WriteString(" " + c.Script)
	}
	if c.Key != "" {
		b.WriteString(" " + c.Key)
	}
	if c.Pipeline {
		b.WriteString(" (pipeline)")
	}
	return b.String()
}

func (m Match) matches(c Command) bool {
	if m.Cmd != "" && !strings.EqualFold(m.Cmd, c.Name) {
		return false
	}
	if m.Script != "" && (c.Script == "" || (m.Script != c.Script && !strings.EqualFold(m.Script, scriptSHA(c)))) {
		return false
	}
	if m.Key != "" && m.Key != c.Key {
		return false
	}
	if m.KeyPrefix != "" && !strings.HasPrefix(c.Key, m.KeyPrefix) {
		return false
	}
	if m.Arg != "" {
		found := false
		for _, a := range c.Args[min(1, len(c.Args)):] {
			if fmt.Sprint(a) == m.Arg {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return m.Func == nil || m.Func(c)
}

// scriptSHA returns the SHA1 of a script command's script (an FCALL's
// function name).
func scriptSHA(c Command) string {
	if len(c.Args) < 2 {
		return ""
	}
	body := fmt.Sprint(c.Args[1])
	if strings.HasPrefix(c.Name, "evalsha") || strings.HasPrefix(c.Name, "fcall") {
		return body
	}
	sum := sha1.Sum([]byte(body))
	return hex.EncodeToString(sum[:])
}

// describe turns a go-redis command into a Command.
func describe(cmd redis.Cmder, pipeline bool) Command {
	args := cmd.Args()
	c := Command{Name: strings.ToLower(cmd.Name()), Args: args, Pipeline: pipeline}
	switch c.Name {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		if len(args) > 1 {
			// A script by its SHA1, a function by its name: both are
			// recorded with the script's name (probe.NameScript).
			id := fmt.Sprint(args[1])
			if strings.HasPrefix(c.Name, "eval") {
				id = scriptSHA(c)
			}
			if n := probe.ScriptName(id); n != "" {
				c.Script = n
			} else {
				c.Script = id
			}
		}
		if len(args) > 3 {
			if n, ok := args[2].(int); ok && n > 0 {
				c.Key = fmt.Sprint(args[3])
			} else if n, ok := args[2].(int64); ok && n > 0 {
				c.Key = fmt.Sprint(args[3])
			}
		}
	default:
		if len(args) > 1 {
			if s, ok := args[1].(string); ok {
				c.Key = s
			}
		}
	}
	return c
}

// Rule is a targeted fault.
type Rule struct {
	Name   string // for the log; default: the action and the match
	Match  Match
	Action Action
	// Nth: fire from the Nth matching command on (default 1).
	Nth int
	// Times: fire this many times (default 1; negative: every time).
	Times int
	// Delay: how long Delay waits.
	Delay time.Duration
	// Until: Hold (and Late) wait until a command matching it has completed.
	Until Match
	// HoldTimeout bounds a Hold or a Late with Until (default 10 s).
	HoldTimeout time.Duration
	// Err: the error of FailBefore (default: one matching ErrFailed).
	Err error
}

// Handle is an added rule.
type Handle struct {
	in    *Injector
	rule  Rule
	seen  int // matches so far
	fired int
	first chan struct{} // closed when the rule first fires
	done  chan struct{} // Observe: closed when an observed command's reply arrived
	ended bool          // done is closed
}

// Fired returns how often the rule fired so far.
func (h *Handle) Fired() int {
	h.in.mu.Lock()
	defer h.in.mu.Unlock()
	return h.fired
}

// FiredC returns a channel closed when the rule first fires (for a Hold:
// when the hold begins; for a DropReply: once the reply was dropped).
func (h *Handle) FiredC() <-chan struct{} { return h.first }

// DoneC, for an Observe rule, returns a channel closed once a command the
// rule observed has completed (its reply, or its error, arrived): the
// command has had its effect on the server, or certainly never will.
// For the other actions it is never closed.
func (h *Handle) DoneC() <-chan struct{} { return h.done }

// Remove removes the rule (a hold in progress continues).
func (h *Handle) Remove() {
	h.in.mu.Lock()
	defer h.in.mu.Unlock()
	for i, r := range h.in.rules {
		if r == h {
			h.in.rules = append(h.in.rules[:i:i], h.in.rules[i+1:]...)
			return
		}
	}
}

// Random is a seeded random fault schedule.
type Random struct {
	Seed  uint64
	Match Match // the commands it applies to (zero: all)
	// Probabilities per command (their sum at most 1).
	DropReply, FailBefore, Delay float64
	MaxDelay                     time.Duration // Delay draws uniformly in (0, MaxDelay]
}

// Event is one action the Injector took.
type Event struct {
	At      time.Time
	Rule    string
	Action  Action
	Command Command
	Outcome string
}

func (e Event) String() string {
	return fmt.Sprintf("%s %s [%s] %s: %s", e.At.Format("15:04:05.000000"), e.Action, e.Rule, e.Command, e.Outcome)
}

// Injector is the hook. Create it with New and attach it with AddHook.
type Injector struct {
	// MaxLog caps the log (default 100,000 events; the oldest are dropped).
	MaxLog int

	mu      sync.Mutex
	rules   []*Handle
	random  *Random
	rng     *rand.Rand
	log     []Event
	dropped int // events dropped from the log
	holds   []*hold
	off     bool
}

type hold struct {
	until Match
	done  chan struct{}
}

// New returns an Injector with no rules: it passes every command through.
func New() *Injector { return &Injector{} }

// Add adds a rule and returns its handle.
func (in *Injector) Add(r Rule) *Handle {
	if r.Nth < 1 {
		r.Nth = 1
	}
	if r.Times == 0 {
		r.Times = 1
	}
	if r.HoldTimeout <= 0 {
		r.HoldTimeout = 10 * time.Second
	}
	if r.Name == "" {
		r.Name = fmt.Sprintf("%s %+v", r.Action, r.Match)
	}
	h := &Handle{in: in, rule: r, first: make(chan struct{}), done: make(chan struct{})}
	in.mu.Lock()
	in.rules = append(in.rules, h)
	in.mu.Unlock()
	return h
}

// SetRandom installs a random schedule (nil: none).
func (in *Injector) SetRandom(r *Random) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if r == nil {
		in.random, in.rng = nil, nil
		return
	}
	cp := *r
	in.random = &cp
	in.rng = rand.New(rand.NewPCG(r.Seed, r.Seed^0x9e3779b97f4a7c15))
}

// SetEnabled turns the Injector off (every command passes, nothing is
// counted) or back on.
func (in *Injector) SetEnabled(on bool) {
	in.mu.Lock()
	in.off = !on
	in.mu.Unlock()
}

// Clear removes every rule and the random schedule (holds in progress
// continue until released or timed out).
func (in *Injector) Clear() {
	in.mu.Lock()
	in.rules, in.random, in.rng = nil, nil, nil
	in.mu.Unlock()
}

// Log returns a copy of the recorded events, oldest first.
func (in *Injector) Log() []Event {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Event(nil), in.log...)
}

// Counts returns how many events of each action the log holds.
func (in *Injector) Counts() map[Action]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[Action]int{}
	for _, e := range in.log {
		out[e.Action]++
	}
	return out
}

func (in *Injector) record(rule string, a Action, c Command, outcome string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.recordLocked(rule, a, c, outcome)
}

func (in *Injector) recordLocked(rule string, a Action, c Command, outcome string) {
	max := in.MaxLog
	if max <= 0 {
		max = 100_000
	}
	if len(in.log) >= max {
		n := len(in.log) - max + 1
		in.log = append(in.log[:0], in.log[n:]...)
		in.dropped += n
	}
	in.log = append(in.log, Event{At: time.Now(), Rule: rule, Action: a, Command: c, Outcome: outcome})
}

// decision is what to do with one command.
type decision struct {
	action Action
	rule   string
	delay  time.Duration
	until  Match
	holdTO time.Duration
	err    error
	handle *Handle
	// observed: the Observe rules that fired on the command, told by
	// observedDone once it completed.
	observed []*Handle
}

// before decides the pre-send action for c (FailBefore, Delay, Hold).
func (in *Injector) before(c Command) (d decision) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.off {
		return d
	}
	var observed []*Handle
	for _, h := range in.rules {
		if h.rule.Action == DropReply || !h.rule.Match.matches(c) {
			continue
		}
		if h.rule.Action == Observe {
			// Observers never stop another rule from acting.
			if in.fireLocked(h) {
				in.recordLocked(h.rule.Name, Observe, c, "seen")
				observed = append(observed, h)
			}
			continue
		}
		if d.action == 0 && in.fireLocked(h) {
			r := h.rule
			d = decision{action: r.Action, rule: r.Name, delay: r.Delay, until: r.Until, holdTO: r.HoldTimeout, err: r.Err, handle: h}
		}
	}
	defer func() { d.observed = observed }()
	if d.action != 0 || in.random == nil || !in.random.Match.matches(c) {
		return d
	}
	// One draw per command, whatever it decides, so the schedule is a
	// function of the seed and the command sequence.
	x := in.rng.Float64()
	r := in.random
	switch {
	case x < r.FailBefore:
		d = decision{action: FailBefore, rule: "random"}
	case x < r.FailBefore+r.Delay && r.MaxDelay > 0:
		d = decision{action: Delay, rule: "random", delay: time.Duration(1 + in.rng.Int64N(int64(r.MaxDelay)))}
	case x < r.FailBefore+r.Delay+r.DropReply:
		d = decision{action: DropReply, rule: "random"} // applied after the reply
	}
	return d
}

// fireLocked counts a match of h and reports whether h fires on it.
func (in *Injector) fireLocked(h *Handle) bool {
	h.seen++
	if h.seen < h.rule.Nth || (h.rule.Times >= 0 && h.fired >= h.rule.Times) {
		return false
	}
	h.fired++
	if h.fired == 1 {
		close(h.first)
	}
	return true
}

// dropAfter decides, once c's reply arrived, whether to drop it.
func (in *Injector) dropAfter(c Command, cmdErr error, random bool) (rule string, drop bool) {
	if lualib.IsNoScript(cmdErr) || lualib.IsNoFunction(cmdErr) {
		return "", false // the script did not run; the caller sends EVAL (loads the library) next
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.off {
		return "", false
	}
	for _, h := range in.rules {
		if h.rule.Action != DropReply || !h.rule.Match.matches(c) {
			continue
		}
		if in.fireLocked(h) {
			return h.rule.Name, true
		}
	}
	if random {
		return "random", true
	}
	return "", false
}

// observedDone tells the Observe rules that fired on a command that it
// completed.
func (in *Injector) observedDone(hs []*Handle) {
	if len(hs) == 0 {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, h := range hs {
		if !h.ended {
			h.ended = true
			close(h.done)
		}
	}
}

// completed releases the holds waiting for c.
func (in *Injector) completed(c Command) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.holds) == 0 {
		return
	}
	kept := in.holds[:0]
	for _, h := range in.holds {
		if h.until.matches(c) {
			close(h.done)
		} else {
			kept = append(kept, h)
		}
	}
	for i := len(kept); i < len(in.holds); i++ {
		in.holds[i] = nil
	}
	in.holds = kept
}

// apply performs a pre-send decision. It returns a non-nil error if the
// command must not be sent.
func (in *Injector) apply(ctx context.Context, d decision, c Command) error {
	switch d.action {
	case FailBefore:
		err := d.err
		if err == nil {
			err = &failedError{cmd: c.String()}
		}
		in.record(d.rule, FailBefore, c, "not sent: "+err.Error())
		return err
	case Delay:
		t := time.NewTimer(d.delay)
		defer t.Stop()
		select {
		case <-t.C:
			in.record(d.rule, Delay, c, fmt.Sprintf("sent after %v", d.delay))
			return nil
		case <-ctx.Done():
			in.record(d.rule, Delay, c, "not sent: context ended during the delay")
			return ctx.Err()
		}
	case Hold:
		h := &hold{until: d.until, done: make(chan struct{})}
		in.mu.Lock()
		in.holds = append(in.holds, h)
		in.mu.Unlock()
		start := time.Now()
		t := time.NewTimer(d.holdTO)
		defer t.Stop()
		outcome := ""
		select {
		case <-h.done:
			outcome = fmt.Sprintf("sent after %+v completed (held %v)", d.until, time.Since(start).Round(time.Microsecond))
		case <-t.C:
			outcome = fmt.Sprintf("hold timed out after %v; sent", d.holdTO)
		case <-ctx.Done():
			in.unhold(h)
			in.record(d.rule, Hold, c, "not sent: context ended during the hold")
			return ctx.Err()
		}
		in.unhold(h)
		in.record(d.rule, Hold, c, outcome)
	}
	return nil
}

func (in *Injector) unhold(h *hold) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i, x := range in.holds {
		if x == h {
			in.holds = append(in.holds[:i:i], in.holds[i+1:]...)
			return
		}
	}
}

// late sends cmd in the background once d's delay passed or its Until
// matched a completed command.
func (in *Injector) late(next redis.ProcessHook, cmd redis.Cmder, d decision, c Command) {
	var h *hold
	if !d.until.IsZero() {
		h = &hold{until: d.until, done: make(chan struct{})}
		in.mu.Lock()
		in.holds = append(in.holds, h)
		in.mu.Unlock()
	}
	in.record(d.rule, Late, c, "caller told the reply was lost; command held back")
	go func() {
		start := time.Now()
		wait := d.delay
		if h != nil {
			wait = d.holdTO
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		if h != nil {
			select {
			case <-h.done:
			case <-t.C:
			}
			in.unhold(h)
		} else {
			<-t.C
		}
		err := next(context.Background(), cmd)
		in.completed(c)
		in.observedDone(d.observed)
		in.record(d.rule, Late, c, fmt.Sprintf("sent %v late: %s", time.Since(start).Round(time.Microsecond), replyOf(cmd, err)))
	}()
}

// DialHook applies FailBefore and Delay rules matching Cmd "dial".
func (in *Injector) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c := Command{Name: "dial", Key: addr, Args: []any{"dial", network, addr}}
		d := in.before(c)
		if d.action != FailBefore && d.action != Delay {
			d = decision{}
		}
		if err := in.apply(ctx, d, c); err != nil {
			return nil, err
		}
		return next(ctx, network, addr)
	}
}

// ProcessHook applies the rules to single commands.
func (in *Injector) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c := describe(cmd, false)
		d := in.before(c)
		switch d.action {
		case Late:
			in.late(next, cmd.Clone(), d, c)
			derr := &droppedError{cmd: c.String()}
			cmd.SetErr(derr)
			return derr
		}
		if d.action != DropReply {
			if err := in.apply(ctx, d, c); err != nil {
				in.observedDone(d.observed) // certainly never sent
				cmd.SetErr(err)
				return err
			}
		}
		err := next(ctx, cmd)
		in.completed(c)
		if len(d.observed) > 0 {
			in.record(d.observed[0].rule.Name, Observe, c, "completed: "+replyOf(cmd, err))
		}
		in.observedDone(d.observed)
		if rule, drop := in.dropAfter(c, err, d.action == DropReply); drop {
			in.record(rule, DropReply, c, "ran; reply dropped: "+replyOf(cmd, err))
			derr := &droppedError{cmd: c.String()}
			cmd.SetErr(derr)
			return derr
		}
		return err
	}
}

// ProcessPipelineHook applies the rules to each command of a pipeline.
func (in *Injector) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		descs := make([]Command, len(cmds))
		randomDrop := make([]bool, len(cmds))
		var observed []*Handle // told once the pipeline completed
		defer func() { in.observedDone(observed) }()
		failAt := -1 // the first command not sent
		var failErr error
	decide:
		for i, cmd := range cmds {
			descs[i] = describe(cmd, true)
			d := in.before(descs[i])
			observed = append(observed, d.observed...)
			switch d.action {
			case DropReply:
				randomDrop[i] = true
			case FailBefore:
				failAt, failErr = i, in.apply(ctx, d, descs[i])
				break decide
			case Delay, Hold, Late: // Late: the pipeline waits, as Hold
				if d.action == Late {
					d.action = Hold
				}
				if err := in.apply(ctx, d, descs[i]); err != nil {
					failAt, failErr = 0, err // the context ended: nothing sent
					break decide
				}
			}
		}
		sent := cmds
		if failAt >= 0 {
			sent = cmds[:failAt]
			for _, cmd := range cmds[failAt:] {
				cmd.SetErr(failErr)
			}
		}
		var err error
		if len(sent) > 0 {
			err = next(ctx, sent)
		}
		for i := range sent {
			in.completed(descs[i])
		}
		for i, cmd := range sent {
			rule, drop := in.dropAfter(descs[i], cmd.Err(), randomDrop[i])
			if !drop {
				continue
			}
			for j := i; j < len(sent); j++ {
				r := rule
				if j > i {
					r += " (after an earlier reply in the pipeline was dropped)"
				}
				in.record(r, DropReply, descs[j], "ran; reply dropped: "+replyOf(sent[j], sent[j].Err()))
				sent[j].SetErr(&droppedError{cmd: descs[j].String()})
			}
			err = sent[i].Err()
			break
		}
		if failAt >= 0 && err == nil {
			err = failErr
		}
		return err
	}
}

// replyOf summarises the reply a DropReply hid.
func replyOf(cmd redis.Cmder, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	s := cmd.String()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}
