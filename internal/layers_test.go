package internal_test

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The layers of package dlock, lowest first. A layer is the package
// internal/<name> and the packages under it; the root package is the top.
// A lower layer never imports a higher one.
var layers = []string{
	"scripts", // every Lua script and their registry
	"rexec",   // command execution: the caller pipeline, bulk calls, NOSCRIPT
	"notify",  // the pub/sub notifier
	"engine",  // lease, renewal, wait loop, withdraw, release
	"",        // the root package: what users see
}

// TestLayers checks the imports of the module's Go code (test files
// aside) against the layers: a layer imports no higher layer, and every
// other package that a layer imports, directly or through others (helpers
// such as internal/probe, internal/keyrules, package protocol), imports no
// layer and not the root: helpers are below every layer. Layers not yet
// created are skipped. Packages that no layer reaches (commands, tools
// for tests and demos, packages built on the root such as redlock) may
// import anything.
func TestLayers(t *testing.T) {
	mod, pkgs := modulePackages(t)
	rank := func(p string) int {
		rel, ok := strings.CutPrefix(p, mod)
		if !ok {
			return -1
		}
		if rel == "" {
			return len(layers) - 1
		}
		for i, l := range layers[:len(layers)-1] {
			if rel == "/internal/"+l || strings.HasPrefix(rel, "/internal/"+l+"/") {
				return i
			}
		}
		return -1
	}
	name := func(p string) string {
		if p == mod {
			return "the root package"
		}
		return strings.TrimPrefix(p, mod+"/")
	}
	present := map[int]bool{}
	for p := range pkgs {
		if r := rank(p); r >= 0 {
			present[r] = true
		}
	}
	if !present[0] || !present[len(layers)-1] {
		t.Fatalf("module %s: the root package or internal/scripts not found (layers found: %v)", mod, present)
	}

	// Every package a layer reaches through imports, other layers aside.
	helpers := map[string]bool{}
	var reach func(p string)
	reach = func(p string) {
		for _, imp := range pkgs[p].imports {
			if _, ours := pkgs[imp]; !ours || rank(imp) >= 0 || helpers[imp] {
				continue
			}
			helpers[imp] = true
			reach(imp)
		}
	}
	var paths []string
	for p := range pkgs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if rank(p) >= 0 {
			reach(p)
		}
	}

	var hs []string
	for _, p := range paths {
		if helpers[p] {
			hs = append(hs, name(p))
		}
	}
	t.Logf("layers found %v (of %d); helpers below them: %v", present, len(layers), hs)

	for _, p := range paths {
		r := rank(p)
		if r < 0 && !helpers[p] {
			continue
		}
		for _, imp := range pkgs[p].imports {
			ri := rank(imp)
			switch {
			case ri < 0:
			case r >= 0 && ri > r:
				t.Errorf("%s (layer %d) imports %s (layer %d), a higher layer (%s)", name(p), r, name(imp), ri, pkgs[p].where[imp])
			case r < 0:
				t.Errorf("%s, a helper below every layer, imports %s (layer %d) (%s)", name(p), name(imp), ri, pkgs[p].where[imp])
			}
		}
	}
}

// goPackage is one package of the module: the module packages it imports
// (its test files aside), and for each the file that does.
type goPackage struct {
	imports []string
	where   map[string]string
}

// modulePackages returns the module path and its packages by import
// path, read from the sources (go/parser, imports only). Directories
// holding another module (a go.mod of their own), testdata and hidden
// directories are skipped.
func modulePackages(t *testing.T) (string, map[string]*goPackage) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	mod := modulePath(t, filepath.Join(root, "go.mod"))
	pkgs := map[string]*goPackage{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == root {
				return nil
			}
			if n := d.Name(); n == "testdata" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		path := mod
		if rel != "." {
			path = mod + "/" + filepath.ToSlash(rel)
		}
		pkg := pkgs[path]
		if pkg == nil {
			pkg = &goPackage{where: map[string]string{}}
			pkgs[path] = pkg
		}
		for _, is := range f.Imports {
			imp, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				return err
			}
			if imp != mod && !strings.HasPrefix(imp, mod+"/") {
				continue
			}
			if _, seen := pkg.where[imp]; !seen {
				pkg.imports = append(pkg.imports, imp)
				frel, _ := filepath.Rel(root, p)
				pkg.where[imp] = fmt.Sprintf("%s:%d", filepath.ToSlash(frel), fset.Position(is.Pos()).Line)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return mod, pkgs
}

// modulePath returns the module path that the go.mod file at p declares.
func modulePath(t *testing.T, p string) string {
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`)
		}
	}
	t.Fatalf("%s declares no module", p)
	return ""
}
