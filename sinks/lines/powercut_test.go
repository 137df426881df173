package lines_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
	"github.com/trajflow/trajflow/sinks/lines"
)

// TestClosedFileSurvivesAPowerCut: the lines of a closed Writer
// (failures.jsonl, rejects.jsonl at the end of a run) are there after a
// power cut (crashfs drops what was not synced).
func TestClosedFileSurvivesAPowerCut(t *testing.T) {
	fsys := crashfstest.Mount(t)
	path := filepath.Join(fsys.Root(), "failures.jsonl")
	w := lines.New(path)
	for i := range 3 {
		if err := w.Write(map[string]int{"line": i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Cut(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("after the cut: %v", err)
	}
	if n := strings.Count(string(b), "\n"); n != 3 {
		t.Fatalf("after the cut %d lines, want 3", n)
	}
}
