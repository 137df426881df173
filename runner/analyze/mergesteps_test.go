package analyze

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/readback"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// withSteps gives every rollout of gs a step per turn.
func withSteps(gs []*pipeline.Group) []*pipeline.Group {
	for _, g := range gs {
		for _, r := range g.Rollouts {
			r.Steps = make([]pipeline.Step, r.NumTurns)
			for i := range r.Steps {
				r.Steps[i] = pipeline.Step{Reward: float64(i), ResponseTokenIDs: []int32{int32(i), 7}, AnchorGroup: -1}
			}
		}
	}
	return gs
}

// writeStepsRun writes gs as an output directory root: data/part-00000
// and, unless stepOrder is nil, steps/part-00000 with the groups' step
// rows in stepOrder.
func writeStepsRun(t *testing.T, root string, gs, stepOrder []*pipeline.Group) {
	t.Helper()
	writeRun(t, filepath.Join(root, "data"), gs, 8, pqsink.Options{FileRows: 1 << 20})
	if stepOrder == nil {
		return
	}
	w, err := pqsink.NewStepWriter(filepath.Join(root, "steps"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteRows(collate.StepRows(nil, stepOrder)); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit("part-00000.parquet"); err != nil {
		t.Fatal(err)
	}
}

// TestMergeStepsRefusals: merges whose step rows cannot follow their
// trajectories are refused, naming the file, and leave no output.
func TestMergeStepsRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) (inputs []string, out string, opts MergeOptions)
		want  func(dir string) string
	}{
		{"some inputs without step rows", func(t *testing.T, dir string) ([]string, string, MergeOptions) {
			a := withSteps(groups("run-a", 0, 3))
			writeStepsRun(t, filepath.Join(dir, "a"), a, a)
			writeStepsRun(t, filepath.Join(dir, "b"), groups("run-a", 3, 6), nil)
			return []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}, filepath.Join(dir, "out"), MergeOptions{}
		}, func(dir string) string {
			return "has step rows (" + filepath.Join(dir, "a", "steps", "part-00000.parquet") + ") but " + filepath.Join(dir, "b", "data", "part-00000.parquet") + " has none"
		}},
		{"steps out of their data file's order", func(t *testing.T, dir string) ([]string, string, MergeOptions) {
			gs := withSteps(groups("run-a", 0, 6))
			rev := slices.Clone(gs)
			slices.Reverse(rev)
			writeStepsRun(t, filepath.Join(dir, "a"), gs, rev)
			return []string{filepath.Join(dir, "a")}, filepath.Join(dir, "out"), MergeOptions{FileRows: 10}
		}, func(string) string { return "the steps file is not in its data file's order" }},
		{"a step row without its trajectory", func(t *testing.T, dir string) ([]string, string, MergeOptions) {
			gs := withSteps(groups("run-a", 0, 4))
			writeStepsRun(t, filepath.Join(dir, "a"), gs[:3], gs)
			return []string{filepath.Join(dir, "a")}, filepath.Join(dir, "out"), MergeOptions{}
		}, func(dir string) string {
			return filepath.Join(dir, "a", "steps", "part-00000.parquet") + ": step 1 of run_id \"run-a\", task_index 3, attempt 1, rollout_index 0 has no trajectory in " + filepath.Join(dir, "a", "data", "part-00000.parquet")
		}},
		{"forced into a directory without step rows", func(t *testing.T, dir string) ([]string, string, MergeOptions) {
			writeStepsRun(t, filepath.Join(dir, "old"), groups("run-a", 10, 12), nil)
			if _, err := Merge(context.Background(), []string{filepath.Join(dir, "old")}, filepath.Join(dir, "out"), MergeOptions{}); err != nil {
				t.Fatal(err)
			}
			a := withSteps(groups("run-a", 0, 3))
			writeStepsRun(t, filepath.Join(dir, "a"), a, a)
			return []string{filepath.Join(dir, "a")}, filepath.Join(dir, "out"), MergeOptions{Force: true}
		}, func(dir string) string {
			return "the inputs have step rows but " + filepath.Join(dir, "out") + " does not agree: a trajectory part file has no steps file"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			inputs, out, opts := tc.setup(t, dir)
			before, _ := filepath.Glob(filepath.Join(out, "*", "*"))
			_, err := Merge(context.Background(), inputs, out, opts)
			if want := tc.want(dir); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v, want it to say %q", err, want)
			}
			after, _ := filepath.Glob(filepath.Join(out, "*", "*"))
			if !slices.Equal(before, after) {
				t.Fatalf("the refused merge left files: %v, before %v", after, before)
			}
			if m, _ := filepath.Glob(filepath.Join(dir, ".out.merging-*")); len(m) > 0 {
				t.Fatalf("temporary directory left: %v", m)
			}
		})
	}
}

// TestMergeForcedKeepsStepsPaired: files added to a directory with step
// rows (Force) come each with its steps file, committed before it.
func TestMergeForcedKeepsStepsPaired(t *testing.T) {
	dir := t.TempDir()
	a, b := withSteps(groups("run-a", 0, 5)), withSteps(groups("run-a", 5, 9))
	writeStepsRun(t, filepath.Join(dir, "a"), a, a)
	writeStepsRun(t, filepath.Join(dir, "b"), b, b)
	out := filepath.Join(dir, "out")
	if _, err := Merge(context.Background(), []string{filepath.Join(dir, "a")}, out, MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	var order []string
	res, err := Merge(context.Background(), []string{filepath.Join(dir, "b")}, out, MergeOptions{Force: true, FileRows: 10, OnCommit: func(path string, rows int) {
		if _, err := os.Stat(filepath.Join(out, "steps", filepath.Base(path))); err != nil {
			t.Errorf("%s committed before its steps file: %v", path, err)
		}
		order = append(order, filepath.Base(path))
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Steps || len(res.Files) < 2 || order[0] != "part-00001.parquet" {
		t.Fatalf("forced merge: steps %v, files %v", res.Steps, order)
	}
	if err := pqsink.PairSteps(filepath.Join(out, "data"), filepath.Join(out, "steps")); err != nil {
		t.Fatal(err)
	}
	rows, err := readback.Steps(filepath.Join(out, "steps"))
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, g := range append(a, b...) {
		for _, r := range g.Rollouts {
			want += len(r.Steps)
		}
	}
	if len(rows) != want {
		t.Fatalf("%d step rows in the output, want %d", len(rows), want)
	}
}
