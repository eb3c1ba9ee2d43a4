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

// TestReadmeExample keeps README.md's library example runnable: its Go
// block must be the part of Example_readme (example_test.go) between the
// "// README begin" and "// README end" lines, whitespace aside.
func TestReadmeExample(t *testing.T) {
	readme := readFile(t, "README.md")
	block, ok := fencedBlock(readme, "go")
	if !ok {
		t.Fatal("README.md has no ```go block")
	}

	src := readFile(t, "example_test.go")
	start := strings.Index(src, "\nfunc Example_readme() {\n")
	if start < 0 {
		t.Fatal("example_test.go has no func Example_readme")
	}
	body := src[start:]
	if end := strings.Index(body, "\n}\n"); end >= 0 {
		body = body[:end]
	}
	_, rest, ok1 := strings.Cut(body, "// README begin\n")
	region, _, ok2 := strings.Cut(rest, "// README end\n")
	if !ok1 || !ok2 {
		t.Fatal(`Example_readme lacks its "// README begin" / "// README end" lines`)
	}

	if got, want := normalize(block), normalize(region); got != want {
		t.Errorf("README.md's Go block and Example_readme differ (whitespace-normalised):\nREADME:  %s\nExample: %s\nfirst difference at byte %d",
			got, want, firstDiff(got, want))
	}
}

// fencedBlock returns the body of the first fenced code block of lang.
func fencedBlock(md, lang string) (string, bool) {
	var b strings.Builder
	in := false
	sc := bufio.NewScanner(strings.NewReader(md))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in && strings.TrimSpace(line) == "```"+lang:
			in = true
		case in && strings.TrimSpace(line) == "```":
			return b.String(), true
		case in:
			b.WriteString(line)
			b.WriteByte('\n')
		}
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
