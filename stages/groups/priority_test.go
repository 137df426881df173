package groups

import (
	"context"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

// TestPriority: a group's requests get their admission number, groups
// admitted beyond the need (in flight already holding need/rate groups)
// come after every needed one, a task with no group in flight gets none,
// and a group's priority is gone once it finished.
func TestPriority(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name          string
		target, cap   int
		kept, done    int
		admit         int
		wantSpecAfter int // groups admitted before the first speculative one; -1: none
	}{
		// Start: rate 1/2 (the prior), need 4: 8 groups hold the need.
		{"target, start", 4, 100, 0, 0, 10, 8},
		// Rate (3+1)/(6+2) = 1/2, need 1: 2 groups.
		{"target, near the end", 4, 100, 3, 6, 4, 2},
		{"no target: admission order only", 0, 100, 0, 0, 5, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Target: tc.target, MaxAttempts: 1}
			cfg.SetDefaults()
			c := NewController(cfg, tc.cap, 0, nil)
			c.kept, c.finished = tc.kept, tc.done
			var prios []int
			for i := range tc.admit {
				act, _, err := c.Next(ctx)
				if err != nil || act != ActRead {
					t.Fatalf("Next %d: %v %v", i, act, err)
				}
				c.ReadDone(&pipeline.Task{Index: int64(100 + i)})
				p, ok := c.Priority(int64(100 + i))
				if !ok {
					t.Fatalf("group %d has no priority", i)
				}
				prios = append(prios, p)
			}
			for i, p := range prios {
				spec := tc.wantSpecAfter >= 0 && i >= tc.wantSpecAfter
				if got := p >= SpeculativeTier; got != spec {
					t.Errorf("group %d: priority %d speculative %v, want %v", i, p, got, spec)
				}
				if i > 0 && p <= prios[i-1] {
					t.Errorf("group %d: priority %d not after group %d's %d", i, p, i-1, prios[i-1])
				}
			}
			if _, ok := c.Priority(7); ok {
				t.Error("a task never admitted has a priority")
			}
			task := &pipeline.Task{Index: 100}
			c.GroupDone(&pipeline.Group{Key: pipeline.GroupKey{TaskIndex: 100}, Kept: true}, task)
			if _, ok := c.Priority(100); ok {
				t.Error("a finished group still has a priority")
			}
		})
	}
}
