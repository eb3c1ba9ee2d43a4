package lualib

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

func TestBuildTakesWhatItUses(t *testing.T) {
	body := "return owner_check(KEYS[1], ARGV[1])\n"
	got := Build(body)
	if !strings.HasSuffix(got, body) {
		t.Fatalf("the body is not kept whole at the end:\n%s", got)
	}
	for _, want := range []string{"local function is_err(", "local function owner_check("} {
		if !strings.Contains(got, want) {
			t.Errorf("Build lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"q_serve", "fence_draw", "ext_apply", "Q_DEAD", "--"} {
		if strings.Contains(strings.TrimSuffix(got, body), not) {
			t.Errorf("Build has %q, which the body does not use:\n%s", not, got)
		}
	}
	// Through other definitions: q_handoff uses q_serve, which uses
	// q_parse, q_notify, is_err and q_lease; each comes before its users.
	got = Build("return q_handoff(KEYS[1], KEYS[2], ARGV[1], ARGV[2])")
	last := -1
	for _, name := range []string{"local function is_err(", "local function q_lease(", "local function q_notify(",
		"local function q_parse(", "local function q_serve(", "local function q_handoff("} {
		i := strings.Index(got, name)
		if i < 0 || i < last {
			t.Fatalf("%q missing or out of order in:\n%s", name, got)
		}
		last = i
	}
	if strings.Contains(got, "q_release") || strings.Contains(got, "sem_pump") {
		t.Errorf("Build has definitions the body does not use:\n%s", got)
	}
	if src := "-- q_serve\nreturn 1\n"; Build(src) != src {
		t.Errorf("a name in a comment pulled in a definition: %q", Build(src))
	}
}

// Every library definition uses only definitions before it (or itself):
// the order Build emits them in is one Lua's local scoping accepts.
func TestLibraryOrder(t *testing.T) {
	ds := defs()
	at := map[string]int{}
	for i, d := range ds {
		for _, n := range d.names {
			if j, dup := at[n]; dup {
				t.Errorf("%s defined twice in the library (definitions %d and %d)", n, j, i)
			}
			at[n] = i
		}
	}
	for i, d := range ds {
		for _, r := range d.refs {
			if j, ok := at[r]; ok && j > i {
				t.Errorf("%s uses %s, defined after it", d.names[0], r)
			}
		}
	}
}

var (
	defRE     = regexp.MustCompile(`^(\s*)(?:local\s+)?function\s+([A-Za-z_][A-Za-z0-9_.:]*)\s*\(`)
	constLine = regexp.MustCompile(`^local\s+([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)\s*=`)
)

type luaFunc struct {
	file, name string
	body       string // normalized: comments dropped, whitespace collapsed, name removed
}

// luaFuncs returns the named function definitions of a Lua file, at any
// depth, and its top-level constant names.
func luaFuncs(file, src string) (fns []luaFunc, consts []string) {
	lines := strings.Split(src, "\n")
	for i, line := range lines {
		if m := constLine.FindStringSubmatch(line); m != nil && !strings.HasPrefix(line, "local function") {
			for _, n := range strings.Split(m[1], ",") {
				consts = append(consts, strings.TrimSpace(n))
			}
		}
		m := defRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var b strings.Builder
		b.WriteString(strings.Replace(strings.TrimSpace(line), m[2], "", 1))
		for _, l := range lines[i+1:] {
			t := strings.TrimSpace(l)
			if t == "" || strings.HasPrefix(t, "--") {
				continue
			}
			if j := strings.Index(t, " --"); j >= 0 {
				t = strings.TrimSpace(t[:j])
			}
			b.WriteString(" " + strings.Join(strings.Fields(t), " "))
			if strings.HasPrefix(l, m[1]+"end") {
				break
			}
		}
		fns = append(fns, luaFunc{file: file, name: m[2], body: b.String()})
	}
	return fns, consts
}

// moduleLua returns every .lua file of the module (the library's included),
// by path relative to the module root.
func moduleLua(t *testing.T) map[string]string {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	files := map[string]string{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".lua") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			files[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// One copy of each piece of Lua: a library function or constant is defined
// once in the whole module (a script that defines its own copy shadows
// the library's), no two functions anywhere have the same code under
// different names, and only the queue's walk pops a list.
func TestNoCopies(t *testing.T) {
	files := moduleLua(t)
	nlib := 0
	for name := range libFiles() {
		if _, ok := files["internal/lualib/"+name]; !ok {
			t.Fatalf("library file %s not found among the module's .lua files", name)
		}
		nlib++
	}
	if len(files) <= nlib {
		t.Fatalf("found no scripts besides the library (%d files)", len(files))
	}
	lib := map[string]bool{}
	for _, d := range defs() {
		for _, n := range d.names {
			lib[n] = true
		}
	}
	where := map[string][]string{}
	byBody := map[string][]string{}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		fns, consts := luaFuncs(p, files[p])
		for _, f := range fns {
			where[f.name] = append(where[f.name], p)
			byBody[f.body] = append(byBody[f.body], p+": "+f.name)
		}
		for _, c := range consts {
			if lib[c] {
				where[c] = append(where[c], p)
			}
		}
		if p != "internal/lualib/queue.lua" && strings.Contains(files[p], "'LPOP'") {
			t.Errorf("%s pops a list: walks of the wait queue are q_serve's (internal/lualib/queue.lua)", p)
		}
	}
	for n := range lib {
		if len(where[n]) != 1 {
			t.Errorf("library name %s is defined in %v, want once (in internal/lualib)", n, where[n])
		}
	}
	for _, at := range byBody {
		if len(at) > 1 {
			t.Errorf("the same function is defined more than once: %v", at)
		}
	}
}

// Every PUBLISH and SPUBLISH of every script is pcall_publish's: a Redis user the ACL
// does not grant the channel would otherwise have the script end with an
// error after its writes (Redis does not roll them back), and the caller
// would take a done release for a failed one.
func TestPublishOnlyByPcall(t *testing.T) {
	for p, src := range moduleLua(t) {
		if p == "internal/lualib/publish.lua" {
			continue
		}
		for i, line := range strings.Split(src, "\n") {
			code := strings.TrimSpace(line)
			if strings.HasPrefix(code, "--") {
				continue
			}
			up := strings.ToUpper(code)
			if strings.Contains(up, "PUBLISH'") || strings.Contains(up, `PUBLISH"`) {
				t.Errorf("%s:%d publishes by itself (use pcall_publish): %s", p, i+1, code)
			}
		}
	}
}
