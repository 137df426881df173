package docs

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// sameWord is a status that claims parity with a seed.
	sameWord = regexp.MustCompile(`(?i)\bsame\b`)
	// citedTest is a test named in a cell: `TestName`.
	citedTest = regexp.MustCompile("`(Test[A-Za-z0-9_]+)`")
	// testFunc is a test's declaration in a _test.go file.
	testFunc = regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	// mustDiffer are behaviours (first cells) where trajflow is known to
	// differ from the seed in some case, read from the seeds' source: their
	// status must say **different** (with the reason), never plain same.
	mustDiffer = map[string]string{
		"turn limit":                         "max_rollout_turns: 0 runs no turn, env.max_turns: 0 is no limit",
		"environment metadata between turns": `"state": null clears, NeMo RL's None keeps`,
		"rewards":                            "NeMo RL's total_reward is float32",
		"`active_samples_per_turn`, `total_gen_tokens_per_turn`": "NeMo RL never returns them: per_turn is an addition",
		"seeds": "Gym writes the seed at the top level, trajflow in metadata.extra_body",
		"`responses_create_params` in the JSONL and in the bodies sent to the resources server": "the seed's place",
		"output":                 "Gym appends one file line by line; no key does",
		"aggregate metrics file": "_aggregate_metrics.json holds trajflow's numbers; sorted by route, not completion order",
		"group size, turn limit": "env.max_steps: 0 steps nothing",
		"`tool_calling`":         "verl-agent reads it only when the first environment reports it",
		"dynamic sampling":       "float32 episode rewards; the crossing try's overshoot",
	}
)

// moduleTests are the names of the module's tests (func TestX( in every
// _test.go file under the module root).
func moduleTests(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestMigratingCitesTests: in migrating.md's behaviour tables (header
// "| behaviour | … | status |"), every row whose status says "same" cites
// the test that checks it (`TestName` in the status cell), every test
// the page names exists in the module, and the rows of mustDiffer say
// **different**.
func TestMigratingCitesTests(t *testing.T) {
	tests := moduleTests(t)
	if !tests["TestMigratingCitesTests"] {
		t.Fatal("the walk over the module found no tests")
	}
	f, err := os.Open("migrating.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var inTable bool
	var line, tables, same int
	seen := map[string]bool{}
	for sc.Scan() {
		line++
		text := sc.Text()
		for _, m := range citedTest.FindAllStringSubmatch(text, -1) {
			if !tests[m[1]] {
				t.Errorf("migrating.md:%d names %s, which is no test of the module", line, m[1])
			}
		}
		if !strings.HasPrefix(text, "|") {
			inTable = false
			continue
		}
		cells := strings.Split(strings.Trim(text, "|"), "|")
		// A "\|" inside a code span is not a cell boundary.
		for i := 0; i < len(cells)-1; i++ {
			if strings.HasSuffix(cells[i], `\`) {
				cells[i] += "|" + cells[i+1]
				cells = append(cells[:i+1], cells[i+2:]...)
				i--
			}
		}
		first, last := strings.TrimSpace(cells[0]), strings.TrimSpace(cells[len(cells)-1])
		if first == "behaviour" && last == "status" {
			inTable = true
			tables++
			continue
		}
		if !inTable || strings.HasPrefix(first, "---") {
			continue
		}
		if why, ok := mustDiffer[first]; ok {
			seen[first] = true
			if !strings.Contains(last, "**different**") {
				t.Errorf("migrating.md:%d: %q must say **different** (%s)", line, first, why)
			}
		}
		if sameWord.MatchString(last) {
			same++
			if !citedTest.MatchString(last) {
				t.Errorf("migrating.md:%d: %q says same and cites no test (`TestName` in its status)", line, first)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for first := range mustDiffer {
		if !seen[first] {
			t.Errorf("migrating.md has no behaviour row %q", first)
		}
	}
	if tables != 3 || same == 0 {
		t.Fatalf("read %d behaviour tables with %d same rows; want the three seeds' tables", tables, same)
	}
}
