package internal_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxRootExported bounds the root package's exported identifiers: what a
// user of package dlock has to read. A new capability that does not fit
// belongs in a package of its own (as outcome, stripe or fenced do), or
// replaces a name it makes redundant.
const maxRootExported = 120

// TestRootSurface counts the exported identifiers of the root package's
// non-test files: top-level consts, vars, types and funcs, and the
// exported methods of exported types (fields aside).
func TestRootSurface(t *testing.T) {
	names := rootExported(t)
	if len(names) > maxRootExported {
		t.Errorf("the root package exports %d identifiers, over %d:\n%s",
			len(names), maxRootExported, strings.Join(names, "\n"))
	}
	t.Logf("the root package exports %d identifiers (at most %d)", len(names), maxRootExported)
}

// rootExported returns the root package's exported identifiers, sorted:
// "Name" for a top-level one, "Type.Method" for a method.
func rootExported(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, af)
	}
	if len(parsed) == 0 {
		t.Fatal("no Go file in the module root")
	}
	types := map[string]bool{}
	var names []string
	for _, f := range parsed {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range g.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						types[s.Name.Name] = true
						names = append(names, s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							names = append(names, n.Name)
						}
					}
				}
			}
		}
	}
	for _, f := range parsed {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || !fn.Name.IsExported() {
				continue
			}
			if fn.Recv == nil {
				names = append(names, fn.Name.Name)
				continue
			}
			if recv := receiverType(fn.Recv.List[0].Type); types[recv] {
				names = append(names, recv+"."+fn.Name.Name)
			}
		}
	}
	sort.Strings(names)
	return names
}

// receiverType returns the name of a method receiver's type.
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// maxRootDocLines bounds `go doc -all` of the root package: the reference
// a user reads. The mechanism behind each call belongs in docs/.
const maxRootDocLines = 1167

// TestRootDocLength checks the length of `go doc -all` of the root package.
func TestRootDocLength(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	cmd := exec.Command(gobin, "doc", "-all", ".")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go doc -all: %v", err)
	}
	n := bytes.Count(out, []byte("\n"))
	if n > maxRootDocLines {
		t.Errorf("go doc -all of the root package is %d lines, over %d", n, maxRootDocLines)
	}
	t.Logf("go doc -all of the root package is %d lines (at most %d)", n, maxRootDocLines)
}
