package parquet_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/readback"
	"github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

func TestPairSteps(t *testing.T) {
	dir := t.TempDir()
	data, steps := filepath.Join(dir, "data"), filepath.Join(dir, "steps")
	os.MkdirAll(data, 0o755)
	os.MkdirAll(steps, 0o755)
	touch := func(p string) {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	touch(filepath.Join(data, "part-00000.parquet"))
	touch(filepath.Join(steps, "part-00000.parquet"))
	touch(filepath.Join(steps, "part-00001.parquet")) // a crash between the renames
	if err := parquet.PairSteps(data, steps); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(steps, "part-00001.parquet")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the steps file without its data file was kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(steps, "part-00000.parquet")); err != nil {
		t.Fatalf("a paired steps file was removed: %v", err)
	}
	touch(filepath.Join(data, "part-00002.parquet"))
	if err := parquet.PairSteps(data, steps); !errors.Is(err, parquet.ErrUnpaired) {
		t.Fatalf("err %v, want ErrUnpaired", err)
	}
	if err := parquet.PairSteps(filepath.Join(dir, "none"), filepath.Join(dir, "none2")); err != nil {
		t.Fatalf("missing directories: %v", err)
	}
}

// TestStepWriterRoundTrip: rows written read back with Arrow's reader,
// an empty commit still gives a file, and Abort leaves nothing.
func TestStepWriterRoundTrip(t *testing.T) {
	dir := t.TempDir()
	w, err := parquet.NewStepWriter(dir, "zstd", map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	a := "grid"
	r := &pipeline.Rollout{RunID: "run1", Task: &pipeline.Task{Index: 4}, GroupID: "g", TrajID: "t", RolloutIndex: 1, Reward: 2, NumTurns: 2,
		Steps: []pipeline.Step{
			{PromptTokenIDs: []int32{1, 2}, ResponseTokenIDs: []int32{3}, Logprobs: []float32{-0.5}, Reward: 1, ActionValid: true, Anchor: &a, AnchorGroup: 0, AnchorGroupSize: 1, AnchorStd: 1, Return: 2, Advantage: 2},
			{PromptTokenIDs: []int32{4}, ResponseTokenIDs: []int32{5, 6}, Reward: 1, AnchorGroup: -1},
		}}
	if err := w.WriteRows(collate.StepRows(nil, []*pipeline.Group{{Rollouts: []*pipeline.Rollout{r}}})); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit("part-00003.parquet"); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit("part-00004.parquet"); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteRows(nil); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	rows, err := readback.Steps(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	s0, s1 := rows[0], rows[1]
	if s0.RunID != "run1" || s0.TaskIndex != 4 || s0.Step != 1 || s0.EpisodeReward != 2 || s0.EpisodeLength != 2 || !s0.IsActionValid ||
		*s0.AnchorObs != "grid" || *s0.AnchorGroupID != "g/a0" || s0.StepReturn != 2 || len(s0.LossMask) != 1 || s0.ResponseLogprobs[0] != -0.5 {
		t.Fatalf("row 0 = %+v", s0)
	}
	if s1.Step != 2 || s1.IsActionValid || s1.AnchorObs != nil || s1.AnchorGroupID != nil || len(s1.LossMask) != 2 || s1.LossMask[1] != 1 || len(s1.ResponseLogprobs) != 2 {
		t.Fatalf("row 1 = %+v", s1)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("directory holds %d entries, want the two committed files", len(entries))
	}
}
