package parquet_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/readback"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// A StepWriter's file is committed under the name of the trajectory file
// it goes with, and read back with Arrow's reader.
func ExampleStepWriter() {
	dir, _ := os.MkdirTemp("", "trajflow-steps")
	defer os.RemoveAll(dir)
	w, err := pqsink.NewStepWriter(filepath.Join(dir, "steps"), "zstd", nil)
	if err != nil {
		panic(err)
	}
	r := &pipeline.Rollout{RunID: "run1", Task: &pipeline.Task{Index: 0}, GroupID: "g0", TrajID: "g0-0", Reward: 1, NumTurns: 2,
		Steps: []pipeline.Step{
			{PromptTokenIDs: []int32{1, 2, 3}, ResponseTokenIDs: []int32{4, 5}, ActionValid: true, AnchorGroup: -1},
			{PromptTokenIDs: []int32{1, 6}, ResponseTokenIDs: []int32{7}, Reward: 1, ActionValid: true, AnchorGroup: -1},
		}}
	if err := w.WriteRows(collate.StepRows(nil, []*pipeline.Group{{Rollouts: []*pipeline.Rollout{r}}})); err != nil {
		panic(err)
	}
	if err := w.Commit("part-00000.parquet"); err != nil {
		panic(err)
	}
	rows, err := readback.Steps(filepath.Join(dir, "steps"))
	if err != nil {
		panic(err)
	}
	for _, s := range rows {
		fmt.Println(s.TrajID, s.Step, s.PromptTokenIDs, s.ResponseTokenIDs, s.LossMask, s.StepReward, s.EpisodeReward)
	}
	// Output:
	// g0-0 1 [1 2 3] [4 5] [1 1] 0 1
	// g0-0 2 [1 6] [7] [1] 1 1
}
