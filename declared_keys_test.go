package dlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/legacy"
	"github.com/redis/go-redis/v9"
)

// TestScriptsTouchDeclaredKeysOnly runs every kind of lock through its
// script paths (uncontended, queued, handed off, given up, renewed,
// released in bulk, forced) on a private server under MONITOR, by FCALL and
// by EVALSHA, and checks that every key each script's commands touch (as
// COMMAND GETKEYS names them) is one of the keys the script was given. On
// Redis Cluster a script that touches an undeclared key of a migrating
// slot fails mid-way, after writes Redis does not roll back. Before,
// scripts built every waiter's lease and tombstone name themselves.
func TestScriptsTouchDeclaredKeysOnly(t *testing.T) {
	ctx := t.Context()
	s := redistest.Start(t, redistest.Config{})
	mon := startMonitor(t, s.Addr())
	for _, noFunctions := range []bool{false, true} {
		c, rdb := newClientOn(t, s.NewClient(), dlock.Options{NoFunctions: noFunctions})
		exercise(t, ctx, c, rdb, fmt.Sprintf("declared-%v", noFunctions))
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	lines := mon.stop(t)
	checked, seen := checkDeclared(t, ctx, s.Client(t), lines)
	for _, e := range scripts.All() {
		if !seen[e.Name] {
			t.Logf("script %s did not run", e.Name)
		}
	}
	for _, name := range []string{"acquire", "release", "shared_acquire", "holds_release", "reentrant_acquire",
		"multi_acquire", "multi_release", "semaphore_acquire", "semaphore_release", "semaphore_limit", "release_many",
		"holds_extend", "semaphore_extend"} {
		if !seen[name] {
			t.Errorf("script %s never ran: its keys were not checked", name)
		}
	}
	if checked < 100 {
		t.Fatalf("only %d script commands checked", checked)
	}
}

// exercise runs the script paths of every kind of lock on c, on keys
// starting with p.
func exercise(t *testing.T, ctx context.Context, c *dlock.Client, rdb *redis.Client, p string) {
	t.Helper()
	must := func(lk *dlock.Lock, err error) *dlock.Lock {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return lk
	}
	unlock := func(lk *dlock.Lock) {
		t.Helper()
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	queue := func(key string) string { return adminOf(t, c).KeysFor(key).Queue }
	// contend holds key with hold, queues a waiter with wait (and one that
	// gives up), releases, and lets the waiter release: a join, a give-up,
	// a hand-off and its confirmation.
	contend := func(key string, hold, wait func(context.Context) (*dlock.Lock, error)) {
		t.Helper()
		h := must(hold(ctx))
		gctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		if lk, err := wait(gctx); err == nil {
			lk.Unlock(ctx)
		}
		cancel()
		got := make(chan *dlock.Lock, 1)
		go func() {
			lk, err := wait(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- lk
		}()
		awaitWaiter(t, ctx, rdb, queue(key))
		unlock(h)
		if lk := <-got; lk != nil {
			unlock(lk)
		}
	}
	k := p + ":lock"
	unlock(must(c.TryLock(ctx, k)))
	contend(k, func(ctx context.Context) (*dlock.Lock, error) { return c.Lock(ctx, k) },
		func(ctx context.Context) (*dlock.Lock, error) { return c.Lock(ctx, k) })
	lk := must(c.Lock(ctx, k, dlock.WithTTL(time.Second)))
	if err := lk.Extend(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	unlock(lk)

	rw := c.RWLock(p + ":rw")
	unlock(must(rw.RLock(ctx)))
	rlock := func(ctx context.Context) (*dlock.Lock, error) { return rw.RLock(ctx) }
	wlock := func(ctx context.Context) (*dlock.Lock, error) { return rw.Lock(ctx) }
	contend(p+":rw", rlock, wlock)
	contend(p+":rw", wlock, rlock)

	re := c.Reentrant(p + ":re")
	a := must(re.Lock(ctx, "a"))
	unlock(must(re.Lock(ctx, "a")))
	unlock(a)
	contend(p+":re", func(ctx context.Context) (*dlock.Lock, error) { return re.Lock(ctx, "a") },
		func(ctx context.Context) (*dlock.Lock, error) { return re.Lock(ctx, "b") })

	sem := c.Semaphore(p+":sem", 2)
	s1 := must(sem.Acquire(ctx, 1))
	contend(p+":sem", func(ctx context.Context) (*dlock.Lock, error) { return sem.Acquire(ctx, 1) },
		func(ctx context.Context) (*dlock.Lock, error) { return sem.Acquire(ctx, 1) })
	unlock(s1)
	s2 := must(sem.Acquire(ctx, 2))
	got2 := make(chan *dlock.Lock, 1)
	go func() {
		lk, err := sem.Acquire(ctx, 1)
		if err != nil {
			t.Error(err)
		}
		got2 <- lk
	}()
	awaitWaiter(t, ctx, rdb, queue(p+":sem"))
	if err := sem.SetLimit(ctx, 3); err != nil { // lets the waiter in
		t.Fatal(err)
	}
	unlock(<-got2)
	unlock(s2)

	mk := []string{p + ":{m}1", p + ":{m}2"}
	multi := func(ctx context.Context) (*dlock.Lock, error) { return c.LockMulti(ctx, mk) }
	unlock(must(c.TryLockMulti(ctx, mk)))
	h := must(c.Lock(ctx, mk[1]))
	got := make(chan *dlock.Lock, 1)
	go func() {
		lk, err := multi(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	awaitWaiter(t, ctx, rdb, queue(mk[1]))
	unlock(h)
	if lk := <-got; lk != nil {
		unlock(lk)
	}

	ctr := c.Counter(p+":ctr", 2)
	if err := ctr.Set(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := ctr.Take(ctx, 3, func(context.Context, int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := ctr.Total(ctx); err != nil {
		t.Fatal(err)
	}

	lp := dlock.WithProtocol(legacy.New(legacy.Options{Unit: legacy.Milliseconds}))
	unlock(must(c.Lock(ctx, p+":legacy", lp)))

	l, err := c.Election(p+":elect", dlock.ElectionOptions{}).Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Proclaim(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Election().Leader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	// Renewed by the watchdog: each kind's lease, and several in one call.
	ttl := dlock.WithTTL(300 * time.Millisecond)
	renewed := []*dlock.Lock{must(rw.RLock(ctx, ttl)), must(re.Lock(ctx, "a", ttl)), must(sem.Acquire(ctx, 1, ttl)),
		must(c.Lock(ctx, p+":{r}1", ttl)), must(c.Lock(ctx, p+":{r}2", ttl))}
	time.Sleep(600 * time.Millisecond)
	for _, lk := range renewed {
		unlock(lk)
	}

	// Held at Close: released in bulk.
	for i := range 3 {
		must(c.Lock(ctx, fmt.Sprintf("%s:{close}%d", p, i)))
	}
	f := must(c.Lock(ctx, p+":forced"))
	if _, err := adminOf(t, c).ForceRelease(ctx, p+":forced"); err != nil {
		t.Fatal(err)
	}
	if err := f.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("unlock after a forced release: %v", err)
	}
}

// awaitWaiter waits until the queue q has a waiter.
func awaitWaiter(t *testing.T, ctx context.Context, rdb *redis.Client, q string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); rdb.LLen(ctx, q).Val() == 0; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nobody queued in %s", q)
		}
	}
}

// checkDeclared checks every script call in lines: each key its commands
// touch is one of its KEYS. It returns how many of the scripts' commands
// it checked, and the scripts seen, by name.
func checkDeclared(t *testing.T, ctx context.Context, rdb *redis.Client, lines [][]string) (int, map[string]bool) {
	t.Helper()
	names := map[string]string{} // SHA1 or function name -> script name
	for _, e := range scripts.All() {
		names[e.Script.Hash()], names[e.Func] = e.Name, e.Name
	}
	seen := map[string]bool{}
	checked, bad := 0, 0
	var script string
	var declared map[string]bool
	for _, l := range lines {
		if l[0] != "lua" {
			script, declared = "", nil
			cmd := strings.ToUpper(l[1])
			if (cmd == "EVALSHA" || cmd == "FCALL" || cmd == "EVAL") && len(l) >= 4 {
				n, err := strconv.Atoi(l[3])
				if err != nil || 4+n > len(l) {
					t.Fatalf("script call %q", l)
				}
				script = names[l[2]]
				if cmd == "EVAL" {
					script = "eval"
				}
				declared = map[string]bool{}
				for _, k := range l[4 : 4+n] {
					declared[k] = true
				}
				seen[script] = true
			}
			continue
		}
		if declared == nil {
			t.Fatalf("a script's command with no script call before it: %q", l)
		}
		checked++
		for _, k := range keysOf(t, ctx, rdb, l[1:]) {
			if !declared[k] && bad < 10 {
				bad++
				t.Errorf("script %s touches %q, not among its KEYS: %q", script, k, l[1:])
			}
		}
	}
	return checked, seen
}

var getKeys sync.Map // command line -> its keys

// keysOf returns the keys of the command args, as COMMAND GETKEYS names
// them (none for a command without keys).
func keysOf(t *testing.T, ctx context.Context, rdb *redis.Client, args []string) []string {
	t.Helper()
	if len(args) < 2 {
		return nil // TIME, and every command without arguments, has no keys
	}
	id := strings.Join(args, "\x00")
	if v, ok := getKeys.Load(id); ok {
		return v.([]string)
	}
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	keys, err := rdb.CommandGetKeys(ctx, a...).Result()
	if err != nil {
		if !strings.Contains(err.Error(), "no key arguments") && !strings.Contains(err.Error(), "Invalid arguments") {
			t.Fatalf("COMMAND GETKEYS %q: %v", args, err)
		}
		keys = nil
	}
	getKeys.Store(id, keys)
	return keys
}

// monitorConn records a server's MONITOR feed: each line as its client
// ("lua" for a script's command) and its arguments.
type monitorConn struct {
	conn  net.Conn
	mu    sync.Mutex
	lines [][]string
	done  chan struct{}
	addr  string
}

func startMonitor(t *testing.T, addr string) *monitorConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	m := &monitorConn{conn: conn, done: make(chan struct{}), addr: addr}
	fmt.Fprintf(conn, "MONITOR\r\n")
	r := bufio.NewReader(conn)
	if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q, %v", l, err)
	}
	go func() {
		defer close(m.done)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			_, rest, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(l, "+"), "\r\n"), " [")
			if !ok {
				continue
			}
			client, argStr, ok := strings.Cut(rest, "] ")
			_, who, _ := strings.Cut(client, " ")
			args, err := splitMonitorArgs(argStr)
			if !ok || err != nil || len(args) == 0 {
				t.Errorf("MONITOR line %q", l)
				continue
			}
			m.mu.Lock()
			m.lines = append(m.lines, append([]string{who}, args...))
			m.mu.Unlock()
		}
	}()
	return m
}

// stop ends the recording once the server has fed every command sent
// before (an ECHO marker went through), and returns the lines.
func (m *monitorConn) stop(t *testing.T) [][]string {
	t.Helper()
	mark := fmt.Sprintf("declared-keys-end-%d", time.Now().UnixNano())
	rdb := redis.NewClient(&redis.Options{Addr: m.addr})
	defer rdb.Close()
	if err := rdb.Echo(t.Context(), mark).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		m.mu.Lock()
		n := len(m.lines)
		last := n > 0 && len(m.lines[n-1]) == 3 && m.lines[n-1][2] == mark
		m.mu.Unlock()
		if last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("MONITOR never fed the end marker")
		}
	}
	m.conn.Close()
	<-m.done
	return m.lines
}

// splitMonitorArgs splits MONITOR's argument list: double-quoted strings
// in the escaping of Redis's sdscatrepr, separated by spaces.
func splitMonitorArgs(s string) ([]string, error) {
	var out []string
	for i := 0; i < len(s); {
		if s[i] == ' ' {
			i++
			continue
		}
		if s[i] != '"' {
			return nil, errors.New("unquoted argument")
		}
		var b strings.Builder
		for i++; ; {
			if i >= len(s) {
				return nil, errors.New("unterminated argument")
			}
			c := s[i]
			if c == '"' {
				i++
				break
			}
			if c != '\\' || i+1 >= len(s) {
				b.WriteByte(c)
				i++
				continue
			}
			switch e := s[i+1]; e {
			case 'n', 'r', 't', 'a', 'b':
				b.WriteByte(map[byte]byte{'n': '\n', 'r': '\r', 't': '\t', 'a': '\a', 'b': '\b'}[e])
			case 'x':
				if v, err := strconv.ParseUint(s[i+2:min(i+4, len(s))], 16, 8); err == nil && i+4 <= len(s) {
					b.WriteByte(byte(v))
					i += 4
					continue
				}
				b.WriteByte('x')
			default:
				b.WriteByte(e)
			}
			i += 2
		}
		out = append(out, b.String())
	}
	return out, nil
}
