package scripts

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/redis/go-redis/v9"
)

// Every .lua file of the directory is in the registry under its file name
// and has its variable; every variable has its file (get stops the program
// at initialization otherwise).
func TestEveryFileTyped(t *testing.T) {
	des, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[string]bool{}
	for _, de := range des {
		if n, ok := strings.CutSuffix(de.Name(), ".lua"); ok {
			onDisk[n] = true
		}
	}
	all := All()
	if len(all) != len(onDisk) || len(all) == 0 {
		t.Fatalf("registry has %d scripts, the directory %d .lua files", len(all), len(onDisk))
	}
	for _, e := range all {
		if !onDisk[e.Name] {
			t.Errorf("%s is in the registry but has no file", e.Name)
		}
		if !reg.typed[e.Name] {
			t.Errorf("%s.lua has no variable in scripts.go", e.Name)
		}
	}
}

// Each script is its file (which starts with a header naming it) with the
// library definitions it uses in front, named for the fault layer, and
// found back by its *redis.Script.
func TestEntries(t *testing.T) {
	for _, e := range All() {
		if e.Body != lualib.Build(e.Src) || !strings.HasSuffix(e.Body, e.Src) {
			t.Errorf("%s: body is not the file behind its library definitions", e.Name)
		}
		if !strings.HasPrefix(e.Src, "-- "+e.Name+".lua: ") {
			t.Errorf("%s: the file does not start with its header (\"-- %s.lua: what it does\")", e.Name, e.Name)
		}
		if got := probe.ScriptName(e.Script.Hash()); got != e.Name {
			t.Errorf("%s: the fault layer knows its SHA1 as %q", e.Name, got)
		}
		if got, ok := Of(e.Script); !ok || got != e || !Owns(e.Script) || Body(e.Script) != e.Body {
			t.Errorf("%s: not found back by its *redis.Script", e.Name)
		}
	}
	other := redis.NewScript("return 1")
	if _, ok := Of(other); ok || Owns(other) || Body(other) != "" {
		t.Error("a script of another package is taken for one of the registry's")
	}
}

// The root package builds no script of its own: each one it runs comes
// from this registry, so it goes through the Client's pipeline and the
// fault layer knows its name. Its directory holds no .lua file and its
// code embeds none, nor calls redis.NewScript or the library's builders.
func TestRootBuildsNoScript(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	for _, pat := range []string{"*.lua", "scripts/*.lua"} {
		if m, _ := filepath.Glob(filepath.Join(root, pat)); len(m) > 0 {
			t.Errorf("the root package's directory holds scripts outside internal/scripts: %v", m)
		}
	}
	fset := token.NewFileSet()
	paths, _ := filepath.Glob(filepath.Join(root, "*.go"))
	n := 0
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		n++
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if strings.HasPrefix(c.Text, "//go:embed") && strings.Contains(c.Text, ".lua") {
					t.Errorf("%s: %s (scripts live in internal/scripts)", fset.Position(c.Pos()), c.Text)
				}
			}
		}
		ast.Inspect(f, func(x ast.Node) bool {
			call, ok := x.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok {
				switch pkg.Name + "." + sel.Sel.Name {
				case "redis.NewScript", "lualib.Script", "lualib.Build":
					t.Errorf("%s: %s.%s builds a script outside internal/scripts",
						fset.Position(call.Pos()), pkg.Name, sel.Sel.Name)
				}
			}
			return true
		})
	}
	if n == 0 {
		t.Fatal("found no Go file of the root package")
	}
}
