package docs

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// module is the import path prefix of trajflow's packages.
const module = "github.com/trajflow/trajflow"

// layerRule is one row of the allow table: the packages it covers and the
// packages of the module they may import.
type layerRule struct {
	line     int      // in architecture.md
	packages []string // patterns: "a/b" is that package, "a/*" every package below a, "*" every package
	allowed  []string // patterns, as packages
}

// allowHeading is the heading of architecture.md's allow table.
const allowHeading = "## What may import what"

var (
	// parenthetical is a remark in a cell, "(the contract)": its code spans
	// are prose, not patterns.
	parenthetical = regexp.MustCompile(`\([^)]*\)`)
	codeSpan      = regexp.MustCompile("`([^`]*)`")
	patternSyntax = regexp.MustCompile(`^(\*|[a-z0-9_]+(/[a-z0-9_]+)*(/\*)?)$`)
)

// parseAllowTable reads the first table after allowHeading in an
// architecture document. A row is "| `pkg`, `pkg/*` (remark) | `imp`, ... |"
// or "| ... | nothing |". Patterns are code spans outside parentheses.
func parseAllowTable(doc string) ([]layerRule, error) {
	sc := bufio.NewScanner(strings.NewReader(doc))
	var rules []layerRule
	in, table, n := false, false, 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "## ") {
			if in && table {
				break
			}
			in = line == allowHeading
			continue
		}
		if !in {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if table {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 2 {
			return nil, fmt.Errorf("line %d: want 2 cells, got %d: %s", n, len(cells), line)
		}
		if !table { // the header row, then the separator row
			table = true
			if !sc.Scan() {
				return nil, fmt.Errorf("line %d: the table has no separator row", n)
			}
			n++
			continue
		}
		pkgs, err := patterns(cells[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: package cell: %w", n, err)
		}
		if len(pkgs) == 0 {
			return nil, fmt.Errorf("line %d: no package in %q", n, strings.TrimSpace(cells[0]))
		}
		allowed, err := patterns(cells[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: allow cell: %w", n, err)
		}
		if len(allowed) == 0 && !strings.HasPrefix(strings.TrimSpace(cells[1]), "nothing") {
			return nil, fmt.Errorf("line %d: allow cell %q names no package and does not say nothing", n, strings.TrimSpace(cells[1]))
		}
		rules = append(rules, layerRule{line: n, packages: pkgs, allowed: allowed})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("no table under %q", allowHeading)
	}
	return rules, nil
}

// patterns returns the code spans of a cell outside parentheses, checking
// each is a package pattern.
func patterns(cell string) ([]string, error) {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(parenthetical.ReplaceAllString(cell, ""), -1) {
		if !patternSyntax.MatchString(m[1]) {
			return nil, fmt.Errorf("%q is not a package pattern (a/b, a/*, *)", m[1])
		}
		out = append(out, m[1])
	}
	return out, nil
}

// match reports whether pkg (relative to the module) matches pattern, and
// how specific the match is: an exact name beats a/*, which beats a
// shorter prefix's pattern, which beats *.
func match(pattern, pkg string) (bool, int) {
	switch {
	case pattern == "*":
		return true, 0
	case strings.HasSuffix(pattern, "/*"):
		prefix := strings.TrimSuffix(pattern, "*")
		return strings.HasPrefix(pkg, prefix), len(prefix)
	default:
		return pattern == pkg, 1 << 20
	}
}

// ruleFor returns the most specific row matching pkg, or an error when none
// does or two match equally.
func ruleFor(rules []layerRule, pkg string) (*layerRule, error) {
	var best *layerRule
	bestScore, tie := -1, false
	for i := range rules {
		for _, p := range rules[i].packages {
			ok, score := match(p, pkg)
			if !ok {
				continue
			}
			switch {
			case score > bestScore:
				best, bestScore, tie = &rules[i], score, false
			case score == bestScore && best != &rules[i]:
				tie = true
			}
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%s has no row in the table", pkg)
	}
	if tie {
		return nil, fmt.Errorf("%s matches two rows equally", pkg)
	}
	return best, nil
}

// checkLayers checks the import graph (package → the module's packages it
// imports, all relative to the module) against the table. It also fails a
// row that covers no package, and an allowed pattern that names none, so
// that the table cannot go stale.
func checkLayers(rules []layerRule, graph map[string][]string) []string {
	var problems []string
	used := map[*layerRule]bool{}
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, pkg := range pkgs {
		r, err := ruleFor(rules, pkg)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		used[r] = true
		for _, imp := range graph[pkg] {
			ok := false
			for _, a := range r.allowed {
				if m, _ := match(a, imp); m {
					ok = true
					break
				}
			}
			if !ok {
				problems = append(problems, fmt.Sprintf("%s imports %s: its row (architecture.md line %d) allows %s", pkg, imp, r.line, allowedList(r.allowed)))
			}
		}
	}
	for i := range rules {
		r := &rules[i]
		if !used[r] {
			problems = append(problems, fmt.Sprintf("architecture.md line %d: row %s covers no package", r.line, strings.Join(r.packages, ", ")))
		}
		for _, a := range r.allowed {
			hit := false
			for _, pkg := range pkgs {
				if m, _ := match(a, pkg); m {
					hit = true
					break
				}
			}
			if !hit {
				problems = append(problems, fmt.Sprintf("architecture.md line %d: %s names no package", r.line, a))
			}
		}
	}
	return problems
}

func allowedList(a []string) string {
	if len(a) == 0 {
		return "nothing"
	}
	return strings.Join(a, ", ")
}

// importGraph lists every package of the module with the module's
// packages it imports (tests excepted), from go list.
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	gobin := "go"
	if r := os.Getenv("GOROOT"); r != "" {
		gobin = filepath.Join(r, "bin", "go")
	}
	cmd := exec.Command(gobin, "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = ".."
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	rel := func(p string) (string, bool) {
		if p == module {
			return ".", true
		}
		r, ok := strings.CutPrefix(p, module+"/")
		return r, ok
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, ok := rel(f[0])
		if !ok {
			t.Fatalf("go list: %s is not in %s", f[0], module)
		}
		graph[pkg] = []string{}
		for _, imp := range f[1:] {
			if r, ok := rel(imp); ok {
				graph[pkg] = append(graph[pkg], r)
			}
		}
	}
	return graph
}

// Every package of the module imports only what its row of
// architecture.md's allow table allows (tests excepted).
func TestLayers(t *testing.T) {
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := parseAllowTable(string(doc))
	if err != nil {
		t.Fatalf("architecture.md: %v", err)
	}
	graph := importGraph(t)
	if len(graph) < 40 {
		t.Fatalf("go list found %d packages: too few", len(graph))
	}
	for _, p := range checkLayers(rules, graph) {
		t.Error(p)
	}
}

// The parser and the checker catch what they must: a synthetic table and
// import graph with each kind of fault.
func TestCheckLayers(t *testing.T) {
	const doc = "# A\n\n## What may import what\n\n" +
		"| package | may import |\n|---|---|\n" +
		"| `pipeline` | nothing |\n" +
		"| `stages/*` (the `x` stages) | `pipeline` |\n" +
		"| `stages/loop` | `pipeline`, `stages/generate` |\n" +
		"| `bench/*` | `*` |\n" +
		"\nNo component imports `runner`.\n\n## Next\n\n| a | b |\n|---|---|\n| `c` | `d` |\n"
	rules, err := parseAllowTable(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 4 {
		t.Fatalf("parsed %d rows, want 4 (the next section's table is not the allow table): %+v", len(rules), rules)
	}
	if got := rules[1].packages; len(got) != 1 || got[0] != "stages/*" {
		t.Fatalf("stages row: packages %q, want [stages/*] (a parenthetical is prose)", got)
	}
	tests := []struct {
		name  string
		graph map[string][]string
		want  []string // substrings of the problems, in order; none: clean
	}{
		{"clean", map[string][]string{
			"pipeline": {}, "stages/generate": {"pipeline"}, "stages/loop": {"pipeline", "stages/generate"},
			"bench/x": {"stages/loop", "pipeline"},
		}, nil},
		{"a sibling import", map[string][]string{
			"pipeline": {}, "stages/generate": {"pipeline", "stages/loop"}, "stages/loop": {"stages/generate"},
			"bench/x": {},
		}, []string{"stages/generate imports stages/loop: its row (architecture.md line 8) allows pipeline"}},
		{"the bottom imports up", map[string][]string{
			"pipeline": {"stages/loop"}, "stages/generate": {}, "stages/loop": {"stages/generate"}, "bench/x": {},
		}, []string{"pipeline imports stages/loop: its row (architecture.md line 7) allows nothing"}},
		{"an unlisted package", map[string][]string{
			"pipeline": {}, "stages/generate": {"pipeline"}, "stages/loop": {"pipeline", "stages/generate"},
			"bench/x": {}, "runner": {"pipeline"},
		}, []string{"runner has no row in the table"}},
		{"a row covering nothing, an allowed pattern naming nothing", map[string][]string{
			"pipeline": {}, "stages/loop": {"pipeline"},
		}, []string{"line 8: row stages/* covers no package", "line 9: stages/generate names no package", "line 10: row bench/* covers no package"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkLayers(rules, tt.graph)
			if len(got) != len(tt.want) {
				t.Fatalf("problems %q, want %d like %q", got, len(tt.want), tt.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("problem %d: %q, want it to contain %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestParseAllowTableErrors(t *testing.T) {
	head := "## What may import what\n\n| package | may import |\n|---|---|\n"
	for _, tt := range []struct{ name, doc, want string }{
		{"no heading", "# A\n\n| a | b |\n|---|---|\n| `a` | nothing |\n", "no table"},
		{"no table", head[:len("## What may import what\n")] + "\ntext\n", "no table"},
		{"three cells", head + "| `a` | `b` | `c` |\n", "line 5: want 2 cells"},
		{"no package", head + "| the lot | nothing |\n", "line 5: no package"},
		{"prose allow cell", head + "| `a` | everything below |\n", "line 5: allow cell"},
		{"bad pattern", head + "| `a/` | nothing |\n", `"a/" is not a package pattern`},
		{"bad allowed pattern", head + "| `a` | `b*` |\n", `"b*" is not a package pattern`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseAllowTable(tt.doc)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	for _, tt := range []struct {
		pattern, pkg string
		want         bool
	}{
		{"stages/*", "stages/loop", true},
		{"stages/*", "stages/loop/inner", true},
		{"stages/*", "stages", false},
		{"stages/*", "stagesx/loop", false},
		{"envs", "envs", true},
		{"envs", "envs/sim", false},
		{"*", "anything/at/all", true},
	} {
		if got, _ := match(tt.pattern, tt.pkg); got != tt.want {
			t.Errorf("match(%q, %q) = %v, want %v", tt.pattern, tt.pkg, got, tt.want)
		}
	}
}
