package readback_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/readback"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// writeSteps commits one steps file of one two-step trajectory under
// dir/steps and returns its path.
func writeSteps(t *testing.T, dir string) string {
	t.Helper()
	w, err := pqsink.NewStepWriter(filepath.Join(dir, "steps"), "zstd", nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &pipeline.Rollout{RunID: "run1", Task: &pipeline.Task{Index: 3}, GroupID: "g3", TrajID: "g3-0", Reward: 1, NumTurns: 2,
		Steps: []pipeline.Step{
			{PromptTokenIDs: []int32{1, 2}, ResponseTokenIDs: []int32{3}, ActionValid: true, AnchorGroup: -1},
			{PromptTokenIDs: []int32{1, 4}, ResponseTokenIDs: []int32{5, 6}, Reward: 1, ActionValid: true, AnchorGroup: -1},
		}}
	if err := w.WriteRows(collate.StepRows(nil, []*pipeline.Group{{Rollouts: []*pipeline.Rollout{r}}})); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit("part-00000.parquet"); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "steps", "part-00000.parquet")
}

func TestSteps(t *testing.T) {
	dir := t.TempDir()
	path := writeSteps(t, dir)
	rows, err := readback.Steps(filepath.Join(dir, "steps"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].TrajID != "g3-0" || rows[1].Step != 2 || len(rows[1].ResponseTokenIDs) != 2 {
		t.Fatalf("rows %+v, want the two steps of g3-0", rows)
	}
	one, err := readback.StepsFile(path)
	if err != nil || len(one) != 2 {
		t.Fatalf("StepsFile: %d rows, %v", len(one), err)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	steps := writeSteps(t, dir)
	garbage := filepath.Join(dir, "part-00000.parquet")
	if err := os.WriteFile(garbage, []byte("not parquet"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	for _, tt := range []struct {
		name string
		read func() (int, error)
		want string // "" when the read succeeds
	}{
		{"an empty directory", func() (int, error) { rs, err := readback.Dir(empty); return len(rs), err }, ""},
		{"no steps", func() (int, error) { rs, err := readback.Steps(empty); return len(rs), err }, ""},
		{"not Parquet", func() (int, error) { rs, err := readback.File(garbage); return len(rs), err }, garbage},
		{"a directory holding a bad file", func() (int, error) { rs, err := readback.Dir(dir); return len(rs), err }, garbage},
		{"a steps file as data", func() (int, error) { rs, err := readback.File(steps); return len(rs), err }, steps},
		{"a bad steps file", func() (int, error) { rs, err := readback.StepsFile(garbage); return len(rs), err }, garbage},
		{"missing", func() (int, error) { rs, err := readback.File(filepath.Join(empty, "x.parquet")); return len(rs), err }, "x.parquet"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, err := tt.read()
			switch {
			case tt.want == "" && (err != nil || n != 0):
				t.Fatalf("got %d rows, %v; want none and no error", n, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one naming %s", err, tt.want)
			}
		})
	}
}
