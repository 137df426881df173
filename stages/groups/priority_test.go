package groups

import (
	"context"
	"slices"
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

// TestEarlyCancel: under a target of 2, once the kept groups and the
// groups in flight decided (two members of different rewards) hold it,
// every undecided group in flight is cancelled at once and comes back as
// surplus, uncounted; no group is admitted meanwhile; a decided group
// that fails after all opens the budget again.
func TestEarlyCancel(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Target: 2, MaxAttempts: 1, Keep: "nonzero_std"}
	cfg.SetDefaults()
	c := NewController(cfg, 4, 0, nil)
	var cancelled []pipeline.GroupKey
	c.EarlyCancel(NewRule(cfg).Value, func(k pipeline.GroupKey) { cancelled = append(cancelled, k) })
	tasks := map[int64]*pipeline.Task{}
	for i := range 4 {
		if act, _, err := c.Next(ctx); err != nil || act != ActRead {
			t.Fatalf("Next %d: %v %v", i, act, err)
		}
		tasks[int64(i)] = &pipeline.Task{Index: int64(i)}
		c.ReadDone(tasks[int64(i)])
	}
	member := func(task int64, reward float64) {
		c.RolloutDone(&pipeline.Rollout{Task: tasks[task], Status: pipeline.StatusOK, Reward: reward})
	}
	member(0, 1)
	member(0, 0) // group 0 decided
	member(1, 1)
	member(1, 1) // group 1 open
	member(2, 0)
	if len(cancelled) != 0 {
		t.Fatalf("cancelled %v with one group decided", cancelled)
	}
	member(2, 1) // group 2 decided: 2 decided hold the target
	if len(cancelled) != 2 {
		t.Fatalf("cancelled %v, want the open groups 1 and 3", cancelled)
	}
	for _, k := range cancelled {
		if k.TaskIndex != 1 && k.TaskIndex != 3 {
			t.Errorf("cancelled %v, a decided group", k)
		}
	}
	c.mu.Lock()
	b := c.budget()
	c.mu.Unlock()
	if b != 0 {
		t.Errorf("budget %d while the decided groups hold the target, want 0", b)
	}
	// Group 1 comes back cancelled: surplus, not counted.
	ds := c.GroupDone(&pipeline.Group{Key: pipeline.GroupKey{TaskIndex: 1}, FilterReason: ReasonZeroStd}, tasks[1])
	if len(ds) != 1 || ds[0].Verdict != Surplus {
		t.Fatalf("cancelled group: %+v, want surplus", ds)
	}
	// Group 0 fails after all: the budget opens again.
	ds = c.GroupDone(&pipeline.Group{Key: pipeline.GroupKey{TaskIndex: 0}, FilterReason: ReasonError}, tasks[0])
	if len(ds) != 1 || ds[0].Verdict != Drop {
		t.Fatalf("failed group: %+v, want drop", ds)
	}
	c.mu.Lock()
	b = c.budget()
	c.mu.Unlock()
	if b == 0 {
		t.Error("budget 0 after a decided group failed, want room for another")
	}
}

// TestCancelOrder: the groups in flight are cancelled the furthest from
// done first: the fewest members finished, then the lowest priority
// (speculative before needed, the latest admitted first). EarlyCancel
// cancels its undecided groups in that order, and CancelOrder (at the
// target) lists every group in flight in it.
func TestCancelOrder(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// finished: per group admitted (tasks 0..), its finished members'
		// rewards, in the order they finish.
		finished [][]float64
		// early: EarlyCancel on, target 2; want: the tasks in cancel
		// order (EarlyCancel's, or CancelOrder's after the last member).
		early bool
		want  []int64
	}{
		{
			// Target 2, budget 6; groups 4 and 5 go beyond the need
			// (4 groups at the prior rate 1/2): speculative.
			name:     "at the target: fewest finished, then speculative, then latest",
			finished: [][]float64{{1}, {1, 1}, nil, {0}, nil, {1}},
			// none finished: 4 (spec), 2; one: 5 (spec), 3, 0; two: 1.
			want: []int64{4, 2, 5, 3, 0, 1},
		},
		{
			name:     "early cancel: the undecided only, in the same order",
			early:    true,
			finished: [][]float64{{1, 0}, {1, 1}, {0}, nil, {1}, {0, 1}},
			// 0 and 5 decided hold the target: 3 (none), 4 (spec, one),
			// 2 (one), 1 (two).
			want: []int64{3, 4, 2, 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Target: 2, MaxAttempts: 1, Keep: "nonzero_std"}
			cfg.SetDefaults()
			c := NewController(cfg, 8, 0, nil)
			var cancelled []int64
			if tc.early {
				c.EarlyCancel(NewRule(cfg).Value, func(k pipeline.GroupKey) { cancelled = append(cancelled, k.TaskIndex) })
			}
			tasks := map[int64]*pipeline.Task{}
			for i := range tc.finished {
				if act, _, err := c.Next(ctx); err != nil || act != ActRead {
					t.Fatalf("Next %d: %v %v", i, act, err)
				}
				tasks[int64(i)] = &pipeline.Task{Index: int64(i)}
				c.ReadDone(tasks[int64(i)])
			}
			for i, rs := range tc.finished {
				for _, rw := range rs {
					c.RolloutDone(&pipeline.Rollout{Task: tasks[int64(i)], Status: pipeline.StatusOK, Reward: rw})
				}
			}
			if !tc.early {
				for _, k := range c.CancelOrder() {
					cancelled = append(cancelled, k.TaskIndex)
				}
			}
			if !slices.Equal(cancelled, tc.want) {
				t.Errorf("cancelled %v, want %v", cancelled, tc.want)
			}
		})
	}
}

// TestSpare: groups.cancel_undecided_spare as set, or one spare per 32
// kept groups of the target when unset; with one spare the undecided
// groups are cancelled only once the decided groups hold the target plus
// one.
func TestSpare(t *testing.T) {
	one, zero := 1, 0
	for _, tc := range []struct {
		target int
		set    *int
		want   int
	}{{2, nil, 0}, {15, nil, 0}, {16, nil, 1}, {64, nil, 2}, {256, nil, 8}, {256, &zero, 0}, {2, &one, 1}} {
		cfg := Config{Target: tc.target, CancelUndecidedSpare: tc.set}
		if got := cfg.Spare(); got != tc.want {
			t.Errorf("target %d, set %v: spare %d, want %d", tc.target, tc.set, got, tc.want)
		}
	}

	ctx := context.Background()
	cfg := Config{Target: 2, MaxAttempts: 1, Keep: "nonzero_std", CancelUndecidedSpare: &one}
	cfg.SetDefaults()
	c := NewController(cfg, 8, 0, nil)
	var cancelled []int64
	c.EarlyCancel(NewRule(cfg).Value, func(k pipeline.GroupKey) { cancelled = append(cancelled, k.TaskIndex) })
	tasks := map[int64]*pipeline.Task{}
	for i := range 5 {
		if act, _, err := c.Next(ctx); err != nil || act != ActRead {
			t.Fatalf("Next %d: %v %v", i, act, err)
		}
		tasks[int64(i)] = &pipeline.Task{Index: int64(i)}
		c.ReadDone(tasks[int64(i)])
	}
	decide := func(task int64) {
		for _, rw := range []float64{0, 1} {
			c.RolloutDone(&pipeline.Rollout{Task: tasks[task], Status: pipeline.StatusOK, Reward: rw})
		}
	}
	decide(0)
	decide(1)
	if len(cancelled) != 0 {
		t.Fatalf("cancelled %v with the decided groups holding the target but not its spare", cancelled)
	}
	decide(2)
	slices.Sort(cancelled)
	if !slices.Equal(cancelled, []int64{3, 4}) {
		t.Fatalf("cancelled %v, want the undecided groups 3 and 4 once three are decided", cancelled)
	}
}
