package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/config"
)

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// linkRE matches a markdown link's target: [text](target).
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// links lists the relative link targets of a markdown text (code blocks
// left out), without their #anchor.
func links(text string) []string {
	var out []string
	for _, m := range linkRE.FindAllStringSubmatch(stripCode(text), -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		out = append(out, target)
	}
	return out
}

// stripCode blanks fenced code blocks.
func stripCode(text string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			b.WriteString("\n")
			continue
		}
		if !fenced {
			b.WriteString(line)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// docs/README.md links every file under docs/ (the Go files of the docs
// package aside), and every link of it leads to a file.
func TestDocsIndexLinksEveryDoc(t *testing.T) {
	r := root(t)
	index := read(t, "docs/README.md")
	linked := map[string]bool{}
	for _, l := range links(index) {
		target, _, _ := strings.Cut(l, "#")
		linked[filepath.Clean(filepath.Join(r, "docs", filepath.FromSlash(target)))] = true
	}
	n := 0
	err := filepath.WalkDir(filepath.Join(r, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(r, "docs"), path)
		if rel == "README.md" || strings.HasSuffix(rel, ".go") || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		n++
		if !linked[path] {
			t.Errorf("docs/%s is not linked from docs/README.md: add it to its group there", filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 25 {
		t.Fatalf("found %d files under docs/", n)
	}
	for _, h := range []string{"## Guides", "## Reference", "## Design", "## Benchmarks"} {
		if !strings.Contains(index, "\n"+h+"\n") {
			t.Errorf("docs/README.md has no %q group", h)
		}
	}
}

// slug is GitHub's anchor of a heading: lower case, punctuation but - and
// _ dropped, spaces as dashes.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && r != '×' && r != '—' && r != '–':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors lists the anchors of a markdown text's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(stripCode(text), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		s := slug(h)
		if k := seen[s]; k > 0 {
			out[s+"-"+strconv.Itoa(k)] = true
		}
		seen[s]++
		out[s] = true
	}
	return out
}

// Every relative link of README.md, SCHEMA.md, BENCHMARKS.md and the docs
// leads to a file that exists, and a #anchor into a markdown file to one
// of its headings: moving a section breaks no link.
func TestDocLinksResolve(t *testing.T) {
	r := root(t)
	files := []string{"README.md", "SCHEMA.md", "BENCHMARKS.md"}
	entries, err := os.ReadDir(filepath.Join(r, "docs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".md") {
			files = append(files, "docs/"+e.Name())
		}
	}
	for _, f := range files {
		text := read(t, f)
		for _, l := range links(text) {
			target, anchor, _ := strings.Cut(l, "#")
			path := filepath.Join(r, filepath.Dir(filepath.FromSlash(f)), filepath.FromSlash(target))
			if target == "" {
				path = filepath.Join(r, filepath.FromSlash(f))
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: no such file", f, l)
				continue
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(b))[anchor] {
				t.Errorf("%s: link %s: no heading has the anchor #%s", f, l, anchor)
			}
		}
	}
}

// section returns a markdown text's section under heading (up to the next
// heading of its level or above).
func section(text, heading string) string {
	_, after, ok := strings.Cut(text, "\n"+heading+"\n")
	if !ok {
		return ""
	}
	level := strings.Index(heading, " ")
	fenced := false
	for _, line := range strings.SplitAfter(after, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "#") {
			l := strings.Index(line, " ")
			if l > 0 && l <= level && strings.Trim(line[:l], "#") == "" {
				return after[:strings.Index(after, line)]
			}
		}
	}
	return after
}

// README.md is the front door: at most 15 KB, linking the docs index, the
// config reference and the command line.
func TestReadmeFrontDoor(t *testing.T) {
	readme := read(t, "README.md")
	if n := len(readme); n > 15_000 {
		t.Errorf("README.md is %d bytes; the front door holds at most 15,000: move detail into docs/ and link it", n)
	}
	for _, l := range []string{"docs/README.md", "docs/config.md", "docs/commands.md"} {
		if !slices.Contains(links(readme), l) {
			t.Errorf("README.md does not link %s", l)
		}
	}
	for _, h := range []string{"## Set-up", "## Commands", "## Dependencies"} {
		if section(readme, h) == "" {
			t.Errorf("README.md has no %q section", h)
		}
	}
}

// README's test command is the one .ci/run runs (its -timeout flags
// aside), and its quick start config exists.
func TestReadmeCommandsTrue(t *testing.T) {
	readme := section(read(t, "README.md"), "## Set-up")
	var test, quick string
	for _, line := range strings.Split(readme, "\n") {
		switch {
		case strings.HasPrefix(line, "go vet ./..."), strings.HasPrefix(line, "go mod tidy -diff && go vet ./..."):
			test = line
		case strings.HasPrefix(line, "go run ./cmd/trajflow run "):
			quick = line
		}
	}
	if test == "" || quick == "" {
		t.Fatalf("README.md's Set-up has no test command (%q) or no quick start (%q)", test, quick)
	}
	ci := read(t, ".ci/run")
	_, after, ok := strings.Cut(ci, "# The test command README.md gives")
	if !ok {
		t.Fatal(".ci/run does not say where it runs README.md's test command")
	}
	_, after, _ = strings.Cut(after, "\n") // the rest of the comment's line
	var cmd []string
	sc := bufio.NewScanner(strings.NewReader(after))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			continue
		}
		if line == "" {
			if len(cmd) > 0 {
				break
			}
			continue
		}
		cmd = append(cmd, strings.TrimSuffix(line, "\\"))
	}
	timeout := regexp.MustCompile(`\s-timeout \S+`)
	norm := func(s string) string { return strings.Join(strings.Fields(timeout.ReplaceAllString(s, "")), " ") }
	if got, want := norm(strings.Join(cmd, " ")), norm(test); got != want {
		t.Errorf(".ci/run runs\n  %s\nbut README.md gives\n  %s", got, want)
	}
	path := strings.Fields(quick)[4]
	if _, err := config.Load(filepath.Join(root(t), path), nil); err != nil {
		t.Errorf("README.md's quick start %s: %v", path, err)
	}
}

// README's first real-server config is a valid config, and its command
// list is docs/commands.md's.
func TestReadmeFirstConfig(t *testing.T) {
	readme := read(t, "README.md")
	sec := section(readme, "## A first run against a real inference server")
	_, after, ok := strings.Cut(sec, "```yaml\n")
	if !ok {
		t.Fatal("README.md's first run has no YAML block")
	}
	yml, _, _ := strings.Cut(after, "```")
	t.Setenv("OPENAI_API_KEY", "sk-test")
	cfg, err := config.Parse([]byte(yml), "README.md", nil)
	if err != nil {
		t.Fatalf("README.md's first config: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("README.md's first config: %v", err)
	}
	if cfg.Generate.Simulated() || len(cfg.Generate.Endpoints) < 2 {
		t.Errorf("README.md's first config does not point at real servers: %v", cfg.Generate.Endpoints)
	}
	block := func(text string) string {
		_, after, _ := strings.Cut(text, "```\ntrajflow run ")
		b, _, _ := strings.Cut(after, "```")
		return b
	}
	if a, b := block(section(readme, "## Commands")), block(read(t, "docs/commands.md")); a == "" || a != b {
		t.Errorf("README.md's command list and docs/commands.md's differ:\n%s\n---\n%s", a, b)
	}
}

// The Dependencies section says why for every module go.mod requires
// directly.
func TestReadmeDependencies(t *testing.T) {
	deps := section(read(t, "README.md"), "## Dependencies")
	mod := read(t, "go.mod")
	n := 0
	inBlock := false
	for _, line := range strings.Split(mod, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			inBlock = true
			continue
		case line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		if strings.Contains(line, "// indirect") || line == "" {
			continue
		}
		path := strings.Fields(line)[0]
		n++
		// A module named by its path, or (for a sibling of one) by its
		// last two elements.
		short := path
		if parts := strings.Split(path, "/"); len(parts) >= 2 {
			short = strings.Join(parts[len(parts)-2:], "/")
		}
		if !strings.Contains(deps, path) && !strings.Contains(deps, short) {
			t.Errorf("README.md's Dependencies do not say why trajflow requires %s", path)
		}
	}
	if n < 5 {
		t.Fatalf("found %d direct requirements in go.mod", n)
	}
}
