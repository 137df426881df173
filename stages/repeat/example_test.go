package repeat_test

import (
	"fmt"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/repeat"
)

func ExampleExpander_Expand() {
	e := repeat.New(repeat.Config{N: 3, Seed: 1234, SeedMode: "offset"}, "run1", "math", "qwen3-8b")
	task := &pipeline.Task{Index: 17, Messages: []pipeline.Message{{Role: "user", Content: "2+2?"}}}
	for _, attempt := range []int{0, 1} {
		for _, r := range e.Expand(task, attempt) {
			fmt.Println(r.GroupID, r.TrajID, r.Seed, len(r.Messages))
		}
	}
	// Output:
	// t17-a0 t17-a0-r0 1234 1
	// t17-a0 t17-a0-r1 1235 1
	// t17-a0 t17-a0-r2 1236 1
	// t17-a1 t17-a1-r0 1237 1
	// t17-a1 t17-a1-r1 1238 1
	// t17-a1 t17-a1-r2 1239 1
}
