package runner_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
)

// TestResampleBatch: with groups.resample: batch the run reads the input
// (source.limit rows: the batch) once and samples it again, whole, in
// each further attempt until the target is kept, as verl-agent's dynamic
// sampling re-runs its batch: no task beyond the batch is read, and tasks
// kept in one attempt are sampled again in the next. The default
// (same_task) reads new tasks instead.
func TestResampleBatch(t *testing.T) {
	root, _ := filepath.Abs("..")
	load := func(resample string) *config.Config {
		cfg, err := config.Load(filepath.Join(root, "examples/quickstart/config.yaml"), []string{
			"source.path=" + filepath.Join(root, "examples/quickstart/tasks.jsonl"),
			"output.dir=" + t.TempDir(), "run.progress=0",
			"groups.keep=nonzero_std", "groups.target=100", "groups.max_attempts=3", "groups.resample=" + resample,
			"groups.order=task", "output.filtered=true",
		})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg := load("batch")
	cfg.Source.Limit = 4
	if _, err := run(t, cfg, runner.Options{}); err != nil && !isShort(err) {
		t.Fatal(err)
	}
	attempts := map[int64]map[int]bool{}
	keptIn := map[int64]int{}
	for _, dir := range []string{schema.DataDir, schema.FilteredDir} {
		for _, r := range readBack(t, cfg.Output.Dir, dir) {
			if attempts[r.Task.Index] == nil {
				attempts[r.Task.Index] = map[int]bool{}
			}
			if !attempts[r.Task.Index][r.Attempt] && r.Kept {
				keptIn[r.Task.Index]++
			}
			attempts[r.Task.Index][r.Attempt] = true
		}
	}
	if len(attempts) != 4 {
		t.Fatalf("tasks %v: want the 4 of the batch and no other", attempts)
	}
	twice := 0
	for ti, as := range attempts {
		if len(as) != 3 {
			t.Errorf("task %d sampled in attempts %v, want 0, 1 and 2", ti, as)
		}
		if keptIn[ti] > 1 {
			twice++
		}
	}
	if twice == 0 {
		t.Fatalf("no task kept in two attempts (%v): kept tasks were not sampled again", keptIn)
	}

	// same_task reads past the first 4 rows, and samples a kept task once.
	cfg = load("same_task")
	cfg.Source.Limit = 8
	if _, err := run(t, cfg, runner.Options{}); err != nil && !isShort(err) {
		t.Fatal(err)
	}
	seen := map[int64]int{}
	for _, r := range readBack(t, cfg.Output.Dir, schema.DataDir) {
		if r.RolloutIndex == 0 {
			seen[r.Task.Index]++
		}
	}
	for ti, n := range seen {
		if n != 1 {
			t.Fatalf("same_task: task %d kept %d times", ti, n)
		}
	}
}

func isShort(err error) bool { return errors.Is(err, runner.ErrShortOfData) }
