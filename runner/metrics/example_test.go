package metrics_test

import (
	"fmt"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner/metrics"
)

func ExampleAggregator() {
	a := metrics.New()
	// Task 0: 4 samples, 1 correct. Task 1: 4 samples, 2 correct.
	for task, correct := range []int{1, 2} {
		t := &pipeline.Task{Index: int64(task)}
		for i := range 4 {
			acc := 0.0
			if i < correct {
				acc = 1
			}
			a.Add(&pipeline.Rollout{RunID: "run1", Task: t, RolloutIndex: i, Status: pipeline.StatusOK,
				Reward: acc, Metrics: map[string]float64{"acc": acc}, Kept: true, CompletionTokens: 100})
		}
	}
	m := a.Result()
	fmt.Printf("rows %d, tasks %d, accuracy %.3f\n", m.Rows, m.Tasks, m.Correctness.Accuracy)
	for _, at := range m.AtK {
		fmt.Printf("k=%d pass@k %.4f pass^k %.4f mean@k %.4f\n", at.K, at.PassAtK, at.PassHatK, at.MeanAtK)
	}
	// Output:
	// rows 8, tasks 2, accuracy 0.375
	// k=1 pass@k 0.3750 pass^k 0.3750 mean@k 0.3750
	// k=2 pass@k 0.6667 pass^k 0.0833 mean@k 0.3750
	// k=4 pass@k 1.0000 pass^k 0.0000 mean@k 0.3750
}
