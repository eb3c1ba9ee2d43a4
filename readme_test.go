package dlock_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestReadmeExamples keeps README.md's Go examples runnable: every ```go
// block of README.md must be the part of an Example function
// (example*_test.go) between its "// README begin" and "// README end"
// lines, whitespace aside; every such part must be in README.md, which
// names its Example.
func TestReadmeExamples(t *testing.T) {
	readme := readFile(t, "README.md")
	blocks := fencedBlocks(readme, "go")
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block")
	}
	regions := readmeRegions(t)
	if len(regions) == 0 {
		t.Fatal(`no Example has "// README begin" / "// README end" lines`)
	}
	used := map[string]bool{}
	for i, block := range blocks {
		got, found := normalize(block), false
		for name, region := range regions {
			if got == normalize(region) {
				used[name], found = true, true
			}
		}
		if !found {
			t.Errorf("README.md's Go block #%d is no Example's README part (whitespace-normalised):\n%s", i+1, got)
			for name, region := range regions {
				want := normalize(region)
				t.Logf("%s differs at byte %d: %s", name, firstDiff(got, want), want)
			}
		}
	}
	for name := range regions {
		if !used[name] {
			t.Errorf("%s's README part is not a Go block of README.md", name)
		}
		if !strings.Contains(readme, "`"+name+"`") {
			t.Errorf("README.md does not name %s, the source of one of its Go blocks", name)
		}
	}
}

// readmeRegions returns, by Example function name, the lines of each
// Example in example*_test.go between "// README begin" and "// README end".
func readmeRegions(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("example*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	regions := map[string]string{}
	for _, f := range files {
		src := readFile(t, f)
		for rest := src; ; {
			_, after, ok := strings.Cut(rest, "// README begin\n")
			if !ok {
				break
			}
			before := src[:len(src)-len(after)]
			fn := strings.LastIndex(before, "\nfunc Example")
			region, tail, ok := strings.Cut(after, "// README end\n")
			if fn < 0 || !ok {
				t.Fatalf(`%s: a "// README begin" line outside an Example, or without its "// README end"`, f)
			}
			name, _, _ := strings.Cut(before[fn+len("\nfunc "):], "(")
			if _, dup := regions[name]; dup {
				t.Fatalf("%s: %s has two README parts", f, name)
			}
			regions[name] = region
			rest = tail
		}
	}
	return regions
}

// fencedBlocks returns the bodies of the fenced code blocks of lang.
func fencedBlocks(md, lang string) []string {
	var out []string
	var b strings.Builder
	in := false
	sc := bufio.NewScanner(strings.NewReader(md))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in && strings.TrimSpace(line) == "```"+lang:
			in = true
			b.Reset()
		case in && strings.TrimSpace(line) == "```":
			in = false
			out = append(out, b.String())
		case in:
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return out
}

// fencedBlock returns the body of the first fenced code block of lang.
func fencedBlock(md, lang string) (string, bool) {
	if blocks := fencedBlocks(md, lang); len(blocks) > 0 {
		return blocks[0], true
	}
	return "", false
}

func normalize(s string) string { return strings.Join(strings.Fields(s), " ") }

func firstDiff(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mdLink matches an inline Markdown link or image: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestMarkdownLinks checks that every relative link in the repository's
// Markdown files names a file or directory that exists and, for a link
// into a Markdown file, a heading's anchor that exists (links inside code
// blocks and spans are ignored).
func TestMarkdownLinks(t *testing.T) {
	var files []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no Markdown files found")
	}
	checked := 0
	for _, f := range files {
		for _, target := range markdownLinks(readFile(t, f)) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := f
			if path != "" {
				file = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
			}
			checked++
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s: link to %q: no such file or directory", f, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !headingAnchors(readFile(t, file))[anchor] {
				t.Errorf("%s: link to %q: %s has no heading with that anchor", f, target, file)
			}
		}
	}
	if checked == 0 {
		t.Error("no relative links found: the link pattern is broken")
	}
}

// headingAnchors returns the anchors GitHub gives md's headings: lower
// case, punctuation dropped, spaces as hyphens, "-1", "-2"... for repeats.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// markdownLinks returns the link targets of md outside code blocks and
// code spans.
func markdownLinks(md string) []string {
	var out []string
	fence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		// Drop code spans, so `a[i](x)` in code is not a link.
		parts := strings.Split(line, "`")
		for i := 0; i < len(parts); i += 2 {
			for _, m := range mdLink.FindAllStringSubmatch(parts[i], -1) {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// TestReadmeQuickStart keeps README.md's quick start at its two commands,
// and its test command the one .ci/run runs.
func TestReadmeQuickStart(t *testing.T) {
	block, ok := fencedBlock(readFile(t, "README.md"), "sh")
	if !ok {
		t.Fatal("README.md has no ```sh block")
	}
	var cmds []string
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		cmds = append(cmds, strings.TrimSpace(cmd))
	}
	if len(cmds) != 2 || cmds[0] != "go run ./cmd/dlock demo" || !strings.HasPrefix(cmds[1], "go test ") {
		t.Fatalf("README.md's quick start is %q, want the demo and the test command", cmds)
	}
	ci := "\n" + readFile(t, filepath.Join(".ci", "run")) + "\n"
	if !strings.Contains(ci, "\n"+cmds[1]+"\n") {
		t.Errorf(".ci/run does not run README.md's test command %q on a line of its own", cmds[1])
	}
}

// TestDocSizes keeps the entry documents short enough to be read as
// references: the details belong in docs/ and the package docs.
func TestDocSizes(t *testing.T) {
	for name, limit := range map[string]int{
		"README.md":                                7 << 10,
		filepath.Join("bench", "README.md"):        15 << 10,
		filepath.Join("cmd", "dlock", "README.md"): 10 << 10,
	} {
		if n := len(readFile(t, name)); n > limit {
			t.Errorf("%s is %d bytes, over its %d", name, n, limit)
		}
	}
}
