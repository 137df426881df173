package groups_test

import (
	"context"
	"fmt"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/groups"
)

// A controller in task order holds a finished group until every task read
// before it is resolved: task 1 finishes first but is committed after
// task 0, and the target of 1 is met by task 0, the first passing in task
// order, so task 1 is surplus.
func ExampleController_taskOrder() {
	c := groups.NewController(groups.Config{Keep: "nonzero_std", MaxAttempts: 1, Target: 1, Order: "task"}, 4, 0, nil)
	var tasks []*pipeline.Task
	for i := range 2 {
		c.Next(context.Background()) // ActRead: the source reads a task
		t := &pipeline.Task{Index: int64(i)}
		c.ReadDone(t)
		tasks = append(tasks, t)
	}
	show := func(ds []groups.Decision) {
		for _, d := range ds {
			fmt.Printf("task %d: %v\n", d.Group.Key.TaskIndex, map[groups.Verdict]string{groups.Keep: "keep", groups.Surplus: "surplus"}[d.Verdict])
		}
	}
	show(c.GroupDone(&pipeline.Group{Key: pipeline.GroupKey{TaskIndex: 1}, Kept: true}, tasks[1])) // waits for task 0
	show(c.GroupDone(&pipeline.Group{Key: pipeline.GroupKey{TaskIndex: 0}, Kept: true}, tasks[0]))
	// Output:
	// task 0: keep
	// task 1: surplus
}
