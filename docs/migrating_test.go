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
// the test that checks it (`TestName` in the status cell), and every test
// the page names exists in the module.
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
	if tables != 3 || same == 0 {
		t.Fatalf("read %d behaviour tables with %d same rows; want the three seeds' tables", tables, same)
	}
}
