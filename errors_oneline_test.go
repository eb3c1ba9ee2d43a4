package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/fenced"
	"github.com/dlock-go/dlock/legacy"
	"github.com/dlock-go/dlock/redlock"
)

// multiLine is an error whose message spans lines, as a Redis error reply
// with a stack, or errors.Join of several errors, can.
var multiLine = errors.Join(errors.New("ERR first line"), errors.New("  second line\r\n\tthird"))

// nlRedisError is a Redis error reply whose text holds newlines.
type nlRedisError string

func (e nlRedisError) Error() string { return string(e) }
func (nlRedisError) RedisError()     {}

// errorPackages returns the directories of the module's packages whose
// exported errors must print on one line: every directory with Go files,
// except internal ones (their errors reach users through the packages
// that export them), commands, test data and nested modules, so that a
// new package cannot be left out. It fails the test if one of the
// packages known to export errors is not found.
func errorPackages(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if path != "." && (strings.HasPrefix(name, ".") || name == "internal" || name == "testdata" || name == "cmd") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != "." {
			return filepath.SkipDir // another module: dlockprom, dlockotel, bench
		}
		if src, _ := filepath.Glob(filepath.Join(path, "*.go")); len(src) > 0 {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".", "admin", "fenced", "legacy", "protocol", "redlock", "stripe"} {
		if !slices.Contains(dirs, want) {
			t.Fatalf("package directory %q not found among %q", want, dirs)
		}
	}
	return dirs
}

// exportedErrorNames parses the non-test files of dir and returns, as
// "pkg.Name", its exported package-level variables named Err* or declared
// as error, its exported types with an Error method, and its exported
// types named *Error (aliases of an internal package's error types, whose
// Error method is declared there).
func exportedErrorNames(t *testing.T, dir string) (vars, types []string) {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		pkg := f.Name.Name
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				if d.Tok == token.TYPE {
					for _, spec := range d.Specs {
						if n := spec.(*ast.TypeSpec).Name; n.IsExported() && strings.HasSuffix(n.Name, "Error") {
							types = append(types, pkg+"."+n.Name)
						}
					}
				}
				if d.Tok != token.VAR {
					continue
				}
				for _, spec := range d.Specs {
					vs := spec.(*ast.ValueSpec)
					typed := false
					if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "error" {
						typed = true
					}
					for _, n := range vs.Names {
						if n.IsExported() && (typed || strings.HasPrefix(n.Name, "Err")) {
							vars = append(vars, pkg+"."+n.Name)
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil || d.Name.Name != "Error" || len(d.Recv.List) != 1 {
					continue
				}
				rt := d.Recv.List[0].Type
				if st, ok := rt.(*ast.StarExpr); ok {
					rt = st.X
				}
				if id, ok := rt.(*ast.Ident); ok && id.IsExported() && !strings.HasSuffix(id.Name, "Error") {
					types = append(types, pkg+"."+id.Name) // one named *Error is found by its declaration
				}
			}
		}
	}
	return vars, types
}

// TestErrorsOneLine: every exported error variable and every exported
// error type of the packages (found by parsing their sources, so that a
// new one cannot be left out), and the errors that wrap what Redis or the
// context said, print on one line.
func TestErrorsOneLine(t *testing.T) {
	vars := map[string]error{
		"dlock.ErrNotAcquired":     dlock.ErrNotAcquired,
		"dlock.ErrNotHeld":         dlock.ErrNotHeld,
		"dlock.ErrLost":            dlock.ErrLost,
		"dlock.ErrExpired":         dlock.ErrExpired,
		"dlock.ErrTaken":           dlock.ErrTaken,
		"dlock.ErrUnreachable":     dlock.ErrUnreachable,
		"dlock.ErrContextDone":     dlock.ErrContextDone,
		"dlock.ErrUnavailable":     dlock.ErrUnavailable,
		"dlock.ErrNoReply":         dlock.ErrNoReply,
		"dlock.ErrNoPermission":    dlock.ErrNoPermission,
		"dlock.ErrWrongType":       dlock.ErrWrongType,
		"dlock.ErrReplicaAck":      dlock.ErrReplicaAck,
		"dlock.ErrEvictionPolicy":  dlock.ErrEvictionPolicy,
		"dlock.ErrExhausted":       dlock.ErrExhausted,
		"dlock.ErrNoLeader":        dlock.ErrNoLeader,
		"dlock.ErrClosed":          dlock.ErrClosed,
		"dlock.ErrReleased":        dlock.ErrReleased,
		"dlock.ErrInvalidArgument": dlock.ErrInvalidArgument,
		"dlock.ErrNilClient":       dlock.ErrNilClient,
		"dlock.ErrNilContext":      dlock.ErrNilContext,
		"dlock.ErrEmptyKey":        dlock.ErrEmptyKey,
		"dlock.ErrKeyTooLong":      dlock.ErrKeyTooLong,
		"dlock.ErrInvalidTTL":      dlock.ErrInvalidTTL,
		"dlock.ErrInvalidOpts":     dlock.ErrInvalidOpts,
		"admin.ErrEmptyToken":      admin.ErrEmptyToken,
		"dlock.ErrInvalidOwner":    dlock.ErrInvalidOwner,
		"dlock.ErrInvalidLimit":    dlock.ErrInvalidLimit,
		"dlock.ErrInvalidPermits":  dlock.ErrInvalidPermits,
		"dlock.ErrInvalidCount":    dlock.ErrInvalidCount,
		"dlock.ErrReservedKey":     dlock.ErrReservedKey,
		"dlock.ErrValueTooLong":    dlock.ErrValueTooLong,
		"dlock.ErrMaybeApplied":    dlock.ErrMaybeApplied,
		"dlock.ErrSegmentMismatch": dlock.ErrSegmentMismatch,
		"redlock.ErrNoQuorum":      redlock.ErrNoQuorum,
		"redlock.ErrTooSlow":       redlock.ErrTooSlow,
		"redlock.ErrSameServer":    redlock.ErrSameServer,
		"legacy.ErrNotTimestamp":   legacy.ErrNotTimestamp,
		"fenced.ErrStale":          fenced.ErrStale,
		"fenced.ErrSuperseded":     fenced.ErrSuperseded,
	}
	// Each type with field values that carry newlines where a caller or
	// Redis can put them.
	types := map[string][]error{
		"dlock.NotAcquiredError": {
			&dlock.NotAcquiredError{Key: "a\nkey", TTL: time.Second},
			&dlock.NotAcquiredError{Key: "a\r\nkey", TTL: -1},
		},
		"dlock.CloseError": {
			&dlock.CloseError{Left: 1, Total: 2, Err: multiLine},
		},
		"dlock.EvictionError": {
			&dlock.EvictionError{Servers: []string{"127.0.0.1:1 has allkeys-lru", "the Sentinel master\nhas volatile-ttl"}},
		},
		"dlock.PermissionError": {
			&dlock.PermissionError{What: "key", Err: nlRedisError("NOPERM no permissions\nto access a key")},
			&dlock.PermissionError{What: "other", Err: multiLine},
		},
		"redlock.QuorumError": {
			&redlock.QuorumError{Op: "acquire", Answered: 1, Quorum: 2, Nodes: 3, NodeErrs: []error{nil, multiLine, nlRedisError("ERR a\nb")}},
		},
		"redlock.SameServerError": {
			&redlock.SameServerError{I: 0, J: 1, RunID: "abc", AddrI: "host\nname:6379", AddrJ: "127.0.0.1:6379"},
		},
		"fenced.StaleError": {
			&fenced.StaleError{Key: "a\nkey", Fence: 1, Last: 2},
			&fenced.StaleError{Key: "a\nkey", Fence: 2, Last: 2},
		},
	}
	var missing []string
	for _, dir := range errorPackages(t) {
		vs, ts := exportedErrorNames(t, dir)
		for _, v := range vs {
			if _, ok := vars[v]; !ok {
				missing = append(missing, "variable "+v)
			}
		}
		for _, ty := range ts {
			if _, ok := types[ty]; !ok {
				missing = append(missing, "type "+ty)
			}
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("exported error %s is not checked here: add it", m)
	}

	check := func(name string, err error) {
		t.Helper()
		if msg := err.Error(); strings.ContainsAny(msg, "\r\n\v\f\u0085\u2028\u2029") {
			t.Errorf("%s prints on more than one line: %q", name, msg)
		}
	}
	for name, err := range vars {
		check(name, err)
	}
	for name, errs := range types {
		for i, err := range errs {
			check(fmt.Sprintf("%s #%d", name, i), err)
		}
	}
}

// TestErrorsOneLineContextDone: ErrContextDone joined with the context's
// error prints on one line.
func TestErrorsOneLineContextDone(t *testing.T) {
	c, _ := newClient(t, dlock.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Lock(ctx, key(t))
	if !errors.Is(err, dlock.ErrContextDone) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with a cancelled context: %v", err)
	}
	if want := "dlock: context done before the lock was acquired: context canceled"; err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
}

// Library errors say what was wrong and with which value, on one line, and
// stay errors.Is-able.
func TestErrorMessagesNameTheValue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := dlock.New(srv.NewClient(), dlock.Options{Prefix: "a{b"})
	if !errors.Is(err, dlock.ErrInvalidOpts) || !strings.Contains(err.Error(), `"a{b"`) {
		t.Errorf("Prefix a{b: %v; want ErrInvalidOpts naming the prefix", err)
	}
	_, err = dlock.New(srv.NewClient(), dlock.Options{TTL: 2 * dlock.MaxTTL})
	if !errors.Is(err, dlock.ErrInvalidTTL) || !strings.Contains(err.Error(), (2*dlock.MaxTTL).String()) {
		t.Errorf("TTL 2*MaxTTL: %v; want ErrInvalidTTL naming the value", err)
	}
	c, _ := newClient(t, dlock.Options{})
	_, err = c.TryLock(ctx, key(t), dlock.WithTTL(time.Millisecond))
	if !errors.Is(err, dlock.ErrInvalidTTL) || !errors.Is(err, dlock.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "1ms is outside 3.0") {
		t.Errorf("WithTTL(1ms): %v; want ErrInvalidTTL naming 1ms and the shortest TTL that works", err)
	}
	_, err = c.TryLock(ctx, strings.Repeat("k", 70_000))
	if !errors.Is(err, dlock.ErrKeyTooLong) || !strings.Contains(err.Error(), "70000 bytes") {
		t.Errorf("70,000-byte key: %v; want ErrKeyTooLong naming the length", err)
	}
	_, err = c.Semaphore(key(t), 0).TryAcquire(ctx, 1)
	if !errors.Is(err, dlock.ErrInvalidLimit) || !strings.Contains(err.Error(), "limit 0") {
		t.Errorf("Semaphore limit 0: %v; want ErrInvalidLimit naming the limit", err)
	}
	// A deleted key is reported as such, not as "expired".
	lk, err := c.TryLock(ctx, key(t))
	if err != nil {
		t.Fatal(err)
	}
	srv.Client(t).Del(ctx, lk.Key())
	err = lk.Unlock(ctx)
	if !errors.Is(err, dlock.ErrExpired) || !strings.Contains(err.Error(), "deleted, or its TTL ran out") {
		t.Errorf("Unlock of a deleted key: %v", err)
	}
	for _, e := range []error{err, dlock.ErrInvalidTTL} {
		if strings.Contains(e.Error(), "\n") {
			t.Errorf("error on several lines: %q", e)
		}
	}
}
