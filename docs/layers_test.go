package docs

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
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

// tableRow is a row of a Markdown table: its cells and its line in the
// document.
type tableRow struct {
	line  int
	cells []string
}

// tableRows returns the body rows of the first table after heading (a
// "## " line), each with want cells; none when there is no such table.
func tableRows(doc, heading string, want int) ([]tableRow, error) {
	sc := bufio.NewScanner(strings.NewReader(doc))
	var rows []tableRow
	in, table, n := false, false, 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "## ") {
			if in && table {
				break
			}
			in = line == heading
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
		if len(cells) != want {
			return nil, fmt.Errorf("line %d: want %d cells, got %d: %s", n, want, len(cells), line)
		}
		if !table { // the header row, then the separator row
			table = true
			if !sc.Scan() {
				return nil, fmt.Errorf("line %d: the table has no separator row", n)
			}
			n++
			continue
		}
		rows = append(rows, tableRow{line: n, cells: cells})
	}
	return rows, sc.Err()
}

// parseAllowTable reads the first table after allowHeading in an
// architecture document. A row is "| `pkg`, `pkg/*` (remark) | `imp`, ... |"
// or "| ... | nothing |". Patterns are code spans outside parentheses.
func parseAllowTable(doc string) ([]layerRule, error) {
	rows, err := tableRows(doc, allowHeading, 2)
	if err != nil {
		return nil, err
	}
	var rules []layerRule
	for _, row := range rows {
		n, cells := row.line, row.cells
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

// floorsHeading is the heading of architecture.md's floors table.
const floorsHeading = "## Floors"

// groundFloor is the folder the floors table's first row holds alone.
const groundFloor = "internal"

// folderSyntax is a top-level folder's name.
var folderSyntax = regexp.MustCompile(`^[a-z0-9_]+$`)

// floor is one row of the floors table: its number (0 is the ground
// floor) and the top-level folders on it.
type floor struct {
	line    int // in architecture.md
	number  int
	folders []string
}

// parseFloors reads the first table after floorsHeading: rows
// "| N | `folder`, `folder` (remark) |", numbered 0, 1, 2, … from the
// ground up. A folder is on one floor only.
func parseFloors(doc string) ([]floor, error) {
	rows, err := tableRows(doc, floorsHeading, 2)
	if err != nil {
		return nil, err
	}
	var floors []floor
	seen := map[string]int{}
	for i, row := range rows {
		n := row.line
		num, err := strconv.Atoi(strings.TrimSpace(row.cells[0]))
		if err != nil || num != i {
			return nil, fmt.Errorf("line %d: floor %q, want %d (floors are numbered 0, 1, 2, … from the ground up)", n, strings.TrimSpace(row.cells[0]), i)
		}
		folders, err := patterns(row.cells[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if len(folders) == 0 {
			return nil, fmt.Errorf("line %d: floor %d names no folder", n, num)
		}
		for _, f := range folders {
			if !folderSyntax.MatchString(f) {
				return nil, fmt.Errorf("line %d: %q is not a top-level folder", n, f)
			}
			if at, dup := seen[f]; dup {
				return nil, fmt.Errorf("line %d: %s is on floor %d already", n, f, at)
			}
			seen[f] = num
		}
		floors = append(floors, floor{line: n, number: num, folders: folders})
	}
	if len(floors) == 0 {
		return nil, fmt.Errorf("no table under %q", floorsHeading)
	}
	return floors, nil
}

// topFolder is the top-level folder of a package relative to the module.
func topFolder(pkg string) string {
	top, _, _ := strings.Cut(pkg, "/")
	return top
}

// checkFloors checks the import graph (package → the module's packages it
// imports, tests excepted, all relative to the module) against the
// floors: a package imports packages of its own top-level folder or of a
// folder on a lower floor, never one on its own floor or above, so that
// the folders' graph has no cycle. It also fails a folder that holds a
// package but is on no floor, a folder on a floor that holds no package,
// and a ground floor that is not groundFloor alone.
func checkFloors(floors []floor, graph map[string][]string) []string {
	var problems []string
	on := map[string]int{}
	line := map[string]int{}
	for _, f := range floors {
		for _, name := range f.folders {
			on[name], line[name] = f.number, f.line
		}
	}
	if len(floors) == 0 || len(floors[0].folders) != 1 || floors[0].folders[0] != groundFloor {
		got := "nothing"
		if len(floors) > 0 {
			got = strings.Join(floors[0].folders, ", ")
		}
		problems = append(problems, fmt.Sprintf("the ground floor (floor 0) holds %s, want %s alone", got, groundFloor))
	}
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	held := map[string]bool{}
	for _, pkg := range pkgs {
		from := topFolder(pkg)
		if !held[from] {
			held[from] = true
			if _, ok := on[from]; !ok {
				problems = append(problems, fmt.Sprintf("folder %s (package %s) is on no floor of the table", from, pkg))
			}
		}
		ff, ok := on[from]
		if !ok {
			continue
		}
		for _, imp := range graph[pkg] {
			to := topFolder(imp)
			tf, known := on[to]
			if to == from || !known || tf < ff {
				continue
			}
			how := "a higher floor"
			if tf == ff {
				how = "its own floor"
			}
			problems = append(problems, fmt.Sprintf("%s (floor %d, %s) imports %s (floor %d, %s): %s", pkg, ff, from, imp, tf, to, how))
		}
	}
	for _, f := range floors {
		for _, name := range f.folders {
			if !held[name] {
				problems = append(problems, fmt.Sprintf("architecture.md line %d: folder %s holds no package", line[name], name))
			}
		}
	}
	return problems
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
// architecture.md's allow table allows, and nothing of a top-level folder
// on its own floor or above (the floors table). Both rules are about the
// code, not its tests: a test may import across (internal/e2e's tests
// import everything, a sink's test builds records with stages/collate).
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
	floors, err := parseFloors(string(doc))
	if err != nil {
		t.Fatalf("architecture.md: %v", err)
	}
	for _, p := range checkFloors(floors, graph) {
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

// The floors checker catches what it must: a synthetic floors table and
// import graph with each kind of fault, and a graph with none.
func TestCheckFloors(t *testing.T) {
	const doc = "# A\n\n## What may import what\n\n| a | b |\n|---|---|\n| `x` | nothing |\n\n" +
		"## Floors\n\n" +
		"| floor | folders |\n|---|---|\n" +
		"| 0 | `internal` (the ground floor) |\n" +
		"| 1 | `pipeline`, `storage` |\n" +
		"| 2 | `stages` |\n" +
		"| 3 | `runner`, `docs` |\n" +
		"\nText.\n"
	floors, err := parseFloors(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(floors) != 4 || floors[1].line != 14 || strings.Join(floors[3].folders, " ") != "runner docs" {
		t.Fatalf("parsed %+v, want 4 floors, floor 1 on line 14, floor 3 runner and docs (a parenthetical is prose)", floors)
	}
	clean := func() map[string][]string {
		return map[string][]string{
			"internal/durable": {}, "internal/pqread": {"internal/durable"},
			"pipeline": {}, "storage": {"internal/durable"},
			"stages/generate": {"pipeline", "internal/pqread"}, "stages/loop": {"stages/generate", "pipeline"},
			"runner": {"stages/loop", "storage", "internal/durable"}, "docs": {},
		}
	}
	with := func(edit func(g map[string][]string)) map[string][]string {
		g := clean()
		edit(g)
		return g
	}
	tests := []struct {
		name   string
		floors []floor
		graph  map[string][]string
		want   []string // substrings of the problems, in order; none: clean
	}{
		{"clean", floors, clean(), nil},
		{"an upward import", floors, with(func(g map[string][]string) {
			g["internal/pqread"] = append(g["internal/pqread"], "pipeline")
		}), []string{"internal/pqread (floor 0, internal) imports pipeline (floor 1, pipeline): a higher floor"}},
		{"an import two floors up", floors, with(func(g map[string][]string) {
			g["pipeline"] = []string{"runner"}
		}), []string{"pipeline (floor 1, pipeline) imports runner (floor 3, runner): a higher floor"}},
		{"a sideways import", floors, with(func(g map[string][]string) {
			g["storage"] = []string{"pipeline"}
		}), []string{"storage (floor 1, storage) imports pipeline (floor 1, pipeline): its own floor"}},
		{"a folder on no floor", floors, with(func(g map[string][]string) {
			g["serve"] = []string{"runner"}
			g["serve/client"] = []string{}
		}), []string{"folder serve (package serve) is on no floor"}},
		{"a folder that holds no package", floors, with(func(g map[string][]string) {
			delete(g, "docs")
		}), []string{"architecture.md line 16: folder docs holds no package"}},
		{"a ground floor that is not internal alone", []floor{
			{line: 1, number: 0, folders: []string{"internal", "pipeline"}},
			{line: 2, number: 1, folders: []string{"storage", "stages"}},
			{line: 3, number: 2, folders: []string{"runner", "docs"}},
		}, clean(), []string{"the ground floor (floor 0) holds internal, pipeline, want internal alone"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkFloors(tt.floors, tt.graph)
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

func TestParseFloorsErrors(t *testing.T) {
	head := "## Floors\n\n| floor | folders |\n|---|---|\n"
	for _, tt := range []struct{ name, doc, want string }{
		{"no heading", "# A\n\n| a | b |\n|---|---|\n| 0 | `internal` |\n", "no table"},
		{"three cells", head + "| 0 | `internal` | x |\n", "line 5: want 2 cells"},
		{"a floor out of order", head + "| 0 | `internal` |\n| 2 | `pipeline` |\n", `line 6: floor "2", want 1`},
		{"a floor that is no number", head + "| ground | `internal` |\n", `line 5: floor "ground", want 0`},
		{"no folder", head + "| 0 | the lot |\n", "line 5: floor 0 names no folder"},
		{"a package, not a folder", head + "| 0 | `internal/durable` |\n", `"internal/durable" is not a top-level folder`},
		{"a folder twice", head + "| 0 | `internal` |\n| 1 | `pipeline`, `internal` |\n", "line 6: internal is on floor 0 already"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseFloors(tt.doc)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
