package docs

import (
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fzipp/gocyclo"
)

// Cyclomatic complexity here is McCabe's as github.com/fzipp/gocyclo counts
// it: 1 for the function, plus 1 for each if, for, range, case clause other
// than default, select clause other than default, && and ||. A function
// literal counts toward the function or method that holds it; a function
// literal assigned at package level is a function of its own.

// statisticsPackages are the packages of the statistics code: run
// statistics, the metrics engine, stats and merge (directories from the
// repository root).
var statisticsPackages = []string{
	"runner/runstats",
	"runner/metrics",
	"runner/analyze",
}

// sizeLimit bounds the code of some files or packages.
type sizeLimit struct {
	// paths are Go files or package directories, from the repository
	// root; a directory stands for its .go files other than tests.
	paths []string
	// complexity is the most any function or method may have; 0 is no
	// limit.
	complexity int
	// lines is the most all of paths may have together (each file, with
	// perFile); 0 is no limit.
	lines   int
	perFile bool
}

// sizeLimits are the limits the code is held to.
var sizeLimits = []sizeLimit{
	{paths: []string{"inference/openai/http.go"}, complexity: 20, lines: 500},
	{paths: statisticsPackages, complexity: 25},
	// The runner's root lists the chain; its stages, commit path and
	// statistics live in their packages.
	{paths: []string{"runner"}, lines: 1000},
	// serve's files, each.
	{paths: []string{"serve"}, lines: 600, perFile: true},
}

// measured is what measure found in some paths.
type measured struct {
	funcs     gocyclo.Stats  // every function and method, with its complexity
	lines     int            // of all files together
	fileLines map[string]int // of each file
	// ignored are the files:lines of //gocyclo: directives, which would
	// hide a function from gocyclo.
	ignored []string
}

// measure parses the Go files of paths (files, or directories whose
// non-test files are taken), relative to root.
func measure(root string, paths []string) (measured, error) {
	var m measured
	m.fileLines = map[string]int{}
	fset := token.NewFileSet()
	for _, p := range paths {
		files, err := goFiles(filepath.Join(root, p))
		if err != nil {
			return m, err
		}
		for _, name := range files {
			src, err := os.ReadFile(name)
			if err != nil {
				return m, err
			}
			f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
			if err != nil {
				return m, err
			}
			n := bytes.Count(src, []byte("\n"))
			m.lines += n
			m.fileLines[name] = n
			m.funcs = gocyclo.AnalyzeASTFile(f, fset, m.funcs)
			for _, cg := range f.Comments {
				for _, c := range cg.List {
					if strings.HasPrefix(c.Text, "//gocyclo:") {
						m.ignored = append(m.ignored, fset.Position(c.Pos()).String())
					}
				}
			}
		}
	}
	return m, nil
}

// goFiles is path itself when it is a file, or the .go files of the
// directory path other than tests; a path that is neither, or a directory
// without Go files, is an error, so that a limit cannot cover nothing.
func goFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	all, err := filepath.Glob(filepath.Join(path, "*.go"))
	if err != nil {
		return nil, err
	}
	var files []string
	for _, f := range all {
		if !strings.HasSuffix(f, "_test.go") {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no Go files", path)
	}
	return files, nil
}

// overLimit lists, as file:line: function: value, every function of m
// over the limit l, and the lines of all files when over l.lines.
func overLimit(m measured, l sizeLimit) []string {
	var out []string
	for _, s := range m.funcs {
		if l.complexity > 0 && s.Complexity > l.complexity {
			out = append(out, fmt.Sprintf("%s:%d: %s: cyclomatic complexity %d, over %d",
				s.Pos.Filename, s.Pos.Line, s.FuncName, s.Complexity, l.complexity))
		}
	}
	for _, at := range m.ignored {
		out = append(out, fmt.Sprintf("%s: a //gocyclo: directive would hide a function from this check", at))
	}
	if l.perFile {
		for _, name := range slices.Sorted(maps.Keys(m.fileLines)) {
			if n := m.fileLines[name]; n > l.lines {
				out = append(out, fmt.Sprintf("%s: %d lines, over %d", name, n, l.lines))
			}
		}
	} else if l.lines > 0 && m.lines > l.lines {
		out = append(out, fmt.Sprintf("%s: %d lines, over %d", strings.Join(l.paths, ", "), m.lines, l.lines))
	}
	return out
}

// No function of the files and packages of sizeLimits is over its
// cyclomatic complexity limit, and no file set over its line limit.
func TestSizeLimits(t *testing.T) {
	for _, l := range sizeLimits {
		m, err := measure("..", l.paths)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.funcs) == 0 {
			t.Errorf("%s: no function measured", strings.Join(l.paths, ", "))
		}
		for _, p := range overLimit(m, l) {
			t.Error(strings.TrimPrefix(p, ".."+string(filepath.Separator)))
		}
		t.Logf("%s: %d lines, %d functions", strings.Join(l.paths, ", "), m.lines, len(m.funcs))
	}
}

// measure counts as the comment at the top of this file says, and
// overLimit names the file, line, function and value of each one over.
func TestMeasureOverLimit(t *testing.T) {
	const src = `package p

func straight() {}

func branches(a, b bool, xs []int, ch chan int) {
	if a && b || !a {
	}
	for i := 0; i < 1; i++ {
	}
	for range xs {
	}
	switch {
	case a:
	case b, !b:
	default:
	}
	select {
	case <-ch:
	default:
	}
}

func (r *recv) withClosure() {
	f := func() {
		if true {
		}
	}
	f()
}

//gocyclo:ignore
func hidden(a bool) {
	if a {
	}
}

var lit = func(a bool) {
	if a {
	}
}
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\nfunc inTest(a bool) {\n\tif a {\n\t}\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := measure(dir, []string{"."})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, s := range m.funcs {
		got[s.FuncName] = s.Complexity
	}
	want := map[string]int{
		"straight": 1,
		// if, &&, ||, for, range, 2 cases (not default), 1 comm clause (not default)
		"branches":            1 + 1 + 2 + 1 + 1 + 2 + 1,
		"(*recv).withClosure": 2,
		"lit":                 2,
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: complexity %d, want %d", name, got[name], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("measured %v, want only %v (no test file, no ignored function)", got, want)
	}
	if m.lines != strings.Count(src, "\n") {
		t.Errorf("lines %d, want %d (test files not counted)", m.lines, strings.Count(src, "\n"))
	}

	problems := overLimit(m, sizeLimit{paths: []string{"p"}, complexity: 2, lines: 10})
	wantProblems := []string{
		filepath.Join(dir, "p.go") + ":5: branches: cyclomatic complexity 9, over 2",
		filepath.Join(dir, "p.go") + ":31:1: a //gocyclo: directive would hide a function from this check",
		fmt.Sprintf("p: %d lines, over 10", strings.Count(src, "\n")),
	}
	if strings.Join(problems, "\n") != strings.Join(wantProblems, "\n") {
		t.Errorf("overLimit:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(wantProblems, "\n"))
	}
	if p := overLimit(m, sizeLimit{complexity: 9}); len(p) != 1 || !strings.Contains(p[0], "gocyclo:") {
		t.Errorf("at limit 9 and no line limit, got %q, want only the directive", p)
	}
	// Lines of each file, no complexity limit: the file over is named.
	each := overLimit(m, sizeLimit{lines: 10, perFile: true})
	if want := fmt.Sprintf("%s: %d lines, over 10", filepath.Join(dir, "p.go"), strings.Count(src, "\n")); len(each) != 2 || each[1] != want {
		t.Errorf("each file over 10 lines: got %q, want the directive and %q", each, want)
	}
	if p := overLimit(m, sizeLimit{lines: 100, perFile: true}); len(p) != 1 {
		t.Errorf("each file within 100 lines: got %q, want only the directive", p)
	}

	for _, bad := range [][]string{{"missing"}, {"empty"}} {
		if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		if _, err := measure(dir, bad); err == nil {
			t.Errorf("measure %s: no error, want one (a limit must cover some code)", bad)
		}
	}
}
