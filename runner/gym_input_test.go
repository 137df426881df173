package runner_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/runner/resume"
	"github.com/trajflow/trajflow/schema"
)

// TestTaskIndexDedupRun runs rows with copies under source.task_index:
// dedup: each distinct row is one task, numbered in order of first
// appearance, and a resume keeps that numbering.
func TestTaskIndexDedupRun(t *testing.T) {
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks.jsonl")
	os.WriteFile(tasks, []byte(`{"question": "What is 1 + 1?", "expected_answer": "2"}
{"question": "What is 2 + 2?", "expected_answer": "4"}
{"expected_answer": "2", "question": "What is 1 + 1?"}
{"question": "What is 3 + 4?", "expected_answer": "7"}
{"question": "What is 2 + 2?", "expected_answer": "4"}
`), 0o644)
	cfg := quickstart(t, "source.path="+tasks, "source.task_index=dedup", "output.batch_rows=4", "output.file_rows=4")
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Tasks != 3 || sum.Rows != 12 {
		t.Fatalf("summary %+v, want 3 tasks of 4 rollouts", sum)
	}
	rs := readBack(t, cfg.Output.Dir, schema.DataDir)
	want := map[int64]string{0: "What is 1 + 1?", 1: "What is 2 + 2?", 2: "What is 3 + 4?"}
	for _, r := range rs {
		if !strings.Contains(string(r.Task.Raw), want[r.Task.Index]) {
			t.Fatalf("task %d holds %s, want %q", r.Task.Index, r.Task.Raw, want[r.Task.Index])
		}
	}
	clean := keys(rs)

	// Drop the last committed file; the resume redoes it under the same indexes.
	paths, _ := filepath.Glob(filepath.Join(cfg.Output.Dir, schema.DataDir, "part-*.parquet"))
	os.Remove(paths[len(paths)-1])
	sum, err = run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Resumed == 0 {
		t.Fatalf("summary %+v: nothing resumed", sum)
	}
	if got := keys(readBack(t, cfg.Output.Dir, schema.DataDir)); !slices.Equal(got, clean) {
		t.Fatalf("resumed keys %v, want %v", got, clean)
	}
}

// TestRowSeedKept runs a NeMo Gym row carrying its own seed: every rollout
// gets it, unless repeat.override_row_seed.
func TestRowSeedKept(t *testing.T) {
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks.jsonl")
	os.WriteFile(tasks, []byte(`{"responses_create_params": {"input": [{"role": "user", "content": "What is 1 + 1?"}], "seed": 42}, "expected_answer": "2"}
{"responses_create_params": {"input": [{"role": "user", "content": "What is 2 + 2?"}]}, "expected_answer": "4"}
`), 0o644)
	for _, tt := range []struct {
		override string
		want     [2][]int64 // seeds of task 0's and task 1's rollouts
	}{
		{"false", [2][]int64{{42, 42, 42, 42}, {0, 1, 2, 3}}},
		{"true", [2][]int64{{0, 1, 2, 3}, {0, 1, 2, 3}}},
	} {
		t.Run("override_row_seed="+tt.override, func(t *testing.T) {
			cfg := quickstart(t, "source.path="+tasks, "repeat.override_row_seed="+tt.override, "repeat.seed=0", "prompt.system=", "prompt.user=")
			if _, err := run(t, cfg, runner.Options{}); err != nil {
				t.Fatal(err)
			}
			var got [2][]int64
			for _, r := range readBack(t, cfg.Output.Dir, schema.DataDir) {
				got[r.Task.Index] = append(got[r.Task.Index], r.Seed)
			}
			for i := range got {
				slices.Sort(got[i])
				if !slices.Equal(got[i], tt.want[i]) {
					t.Errorf("task %d seeds %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// readInputs reads OUTPUT/inputs.jsonl.
func readInputs(t *testing.T, dir string) []resume.Input {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, schema.InputsFile))
	if err != nil {
		t.Fatal(err)
	}
	var out []resume.Input
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var in resume.Input
		if err := json.Unmarshal([]byte(line), &in); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, in)
	}
	return out
}

// TestMaterializedInputs checks OUTPUT/inputs.jsonl: each task's rendered
// request once, with the merged params, and no task twice across a resume
// (a torn last line included).
func TestMaterializedInputs(t *testing.T) {
	cfg := quickstart(t, "source.limit=20", "output.batch_rows=8", "output.file_rows=8")
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	ins := readInputs(t, cfg.Output.Dir)
	if len(ins) != 20 {
		t.Fatalf("%d inputs, want 20", len(ins))
	}
	idx := map[int64]bool{}
	for _, in := range ins {
		idx[in.TaskIndex] = true
	}
	if len(idx) != 20 {
		t.Fatalf("task indexes not unique: %d distinct", len(idx))
	}
	in := ins[0]
	if len(in.Messages) != 2 || in.Messages[0].Role != "system" || !strings.HasPrefix(in.Messages[1].Content, "Solve: ") {
		t.Errorf("messages %+v", in.Messages)
	}
	if in.Params["temperature"] != 1.0 || in.Params["max_tokens"] != 256.0 {
		t.Errorf("params %v", in.Params)
	}
	if _, ok := in.Params["seed"]; ok {
		t.Errorf("a per-task line holds a seed: %v", in.Params)
	}

	// Drop committed work and tear the last line; the resume renders those
	// tasks again but writes none twice.
	paths, _ := filepath.Glob(filepath.Join(cfg.Output.Dir, schema.DataDir, "part-*.parquet"))
	for _, p := range paths[len(paths)/2:] {
		os.Remove(p)
	}
	f, _ := os.OpenFile(filepath.Join(cfg.Output.Dir, schema.InputsFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"task_index": 3, "mess`)
	f.Close()
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Resumed == 0 {
		t.Fatalf("summary %+v: nothing resumed", sum)
	}
	again := readInputs(t, cfg.Output.Dir)
	if len(again) != 20 {
		t.Fatalf("%d inputs after the resume, want 20", len(again))
	}
}
