package analyze

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestResolveServed: trajflow serve's served directory stands for its
// steps' part files in step order, a step folder for its part file; the
// state file and temporary folders are not read.
func TestResolveServed(t *testing.T) {
	served := filepath.Join(t.TempDir(), "served")
	var want []string
	for _, name := range []string{"step-000002", "step-000001", "step-000010"} {
		d := filepath.Join(served, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d, "part-00000.parquet")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want = append(want, p)
	}
	slices.Sort(want)
	for _, extra := range []string{".step-000011.tmp/part-00000.parquet", "state.json", ".lock"} {
		p := filepath.Join(served, extra)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{served, want},
		{filepath.Join(served, "step-000002"), want[1:2]},
	} {
		got, err := ResolveFiles([]string{tc.path})
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.path, got, err, tc.want)
		}
	}
}
