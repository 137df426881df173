package groups_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/groups"
)

// group builds a group from rewards; NaN marks a member that errored.
func group(rewards ...float64) *pipeline.Group {
	t := &pipeline.Task{Index: 7}
	g := &pipeline.Group{Key: pipeline.GroupKey{TaskIndex: 7}}
	for i, r := range rewards {
		ro := &pipeline.Rollout{Task: t, RolloutIndex: i, GroupSize: len(rewards), Status: pipeline.StatusOK, Reward: r}
		if math.IsNaN(r) {
			ro.Status, ro.Reward, ro.Error = pipeline.StatusError, 0, "boom"
		}
		ro.AddMetric("acc", math.Round(r))
		g.Rollouts = append(g.Rollouts, ro)
	}
	return g
}

func TestKeepRules(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name     string
		cfg      groups.Config
		rewards  []float64
		kept     bool
		reason   string
		mean     float64
		std      float64
		statuses string // one letter per member: o ok, f filtered, e error
	}{
		{"all: all zero kept", groups.Config{Keep: "all"}, []float64{0, 0, 0, 0}, true, "", 0, 0, "oooo"},
		{"nonzero_std: all zero dropped", groups.Config{Keep: "nonzero_std"}, []float64{0, 0, 0, 0}, false, groups.ReasonZeroStd, 0, 0, "ffff"},
		{"nonzero_std: all one dropped", groups.Config{Keep: "nonzero_std"}, []float64{1, 1, 1, 1}, false, groups.ReasonZeroStd, 1, 0, "ffff"},
		{"nonzero_std: mixed kept", groups.Config{Keep: "nonzero_std"}, []float64{1, 0, 0, 1}, true, "", 0.5, math.Sqrt(1.0 / 3), "oooo"},
		{"nonzero_std: errored member dropped", groups.Config{Keep: "nonzero_std"}, []float64{1, 0, nan, 1}, false, groups.ReasonError, 2.0 / 3, math.Sqrt(1.0 / 3), "ffef"},
		{"all: errored member kept", groups.Config{Keep: "all"}, []float64{1, nan}, true, "", 1, 0, "oe"},
		{"nonzero_std on metric: same acc dropped", groups.Config{Keep: "nonzero_std", Metric: "acc"}, []float64{0.9, 1.1, 1.0}, false, groups.ReasonZeroStd, 1, 0.1, "fff"},
		{"nonzero_std on metric: different acc kept", groups.Config{Keep: "nonzero_std", Metric: "acc"}, []float64{0.2, 0.9}, true, "", 0.55, math.Sqrt(2) * 0.35, "oo"},
		{"mean_in: inside", groups.Config{Keep: "mean_in", MeanIn: []float64{0.25, 0.75}}, []float64{1, 0, 0, 0}, true, "", 0.25, 0.5, "oooo"},
		{"mean_in: upper bound inclusive", groups.Config{Keep: "mean_in", MeanIn: []float64{0.25, 0.75}}, []float64{1, 1, 1, 0}, true, "", 0.75, 0.5, "oooo"},
		{"mean_in: above", groups.Config{Keep: "mean_in", MeanIn: []float64{0.25, 0.75}}, []float64{1, 1, 1, 1}, false, groups.ReasonMeanOut, 1, 0, "ffff"},
		{"mean_in: below", groups.Config{Keep: "mean_in", MeanIn: []float64{0.25, 0.75}}, []float64{0, 0, 0, 1, 0, 0, 0, 0}, false, groups.ReasonMeanOut, 0.125, math.Sqrt(0.125), "ffffffff"},
		{"single member", groups.Config{Keep: "nonzero_std"}, []float64{1}, false, groups.ReasonZeroStd, 1, 0, "f"},
		// verl-agent's filter compares rewards exactly (==): rewards one
		// ulp apart differ, under any tolerance they would not.
		{"nonzero_std: rewards one ulp apart kept", groups.Config{Keep: "nonzero_std"}, []float64{1, math.Nextafter(1, 2)}, true, "", 1, 0, "oo"},
		{"nonzero_std: 0 and the least float kept", groups.Config{Keep: "nonzero_std"}, []float64{0, 0, math.SmallestNonzeroFloat64}, true, "", 0, 0, "ooo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := group(tt.rewards...)
			groups.NewRule(tt.cfg).Apply(g)
			if g.Kept != tt.kept || g.FilterReason != tt.reason {
				t.Fatalf("kept %v reason %q, want %v %q", g.Kept, g.FilterReason, tt.kept, tt.reason)
			}
			if math.Abs(g.Mean-tt.mean) > 1e-12 || math.Abs(g.Std-tt.std) > 1e-12 {
				t.Fatalf("mean %g std %g, want %g %g", g.Mean, g.Std, tt.mean, tt.std)
			}
			for i, r := range g.Rollouts {
				want := map[byte]pipeline.Status{'o': pipeline.StatusOK, 'f': pipeline.StatusFiltered, 'e': pipeline.StatusError}[tt.statuses[i]]
				if r.Status != want || r.Kept != g.Kept || r.FilterReason != g.FilterReason || r.GroupRewardMean != g.Mean {
					t.Fatalf("member %d: status %s kept %v reason %q", i, r.Status, r.Kept, r.FilterReason)
				}
			}
		})
	}
}

func TestAdvantages(t *testing.T) {
	tests := []struct {
		baseline string
		rewards  []float64
		want     []float64
	}{
		// mean 0.5, std sqrt(1/3)
		{"mean", []float64{1, 0, 0, 1}, []float64{0.5 / math.Sqrt(1.0/3), -0.5 / math.Sqrt(1.0/3), -0.5 / math.Sqrt(1.0/3), 0.5 / math.Sqrt(1.0/3)}},
		// leave-one-out: member 0's baseline is mean(0,0,1) = 1/3
		{"leave_one_out", []float64{1, 0, 0, 1}, []float64{(1 - 1.0/3) / math.Sqrt(1.0/3), (0 - 2.0/3) / math.Sqrt(1.0/3), (0 - 2.0/3) / math.Sqrt(1.0/3), (1 - 1.0/3) / math.Sqrt(1.0/3)}},
		{"mean", []float64{1, 1}, []float64{0, 0}},
		{"leave_one_out", []float64{2, math.NaN(), 0}, []float64{2 / math.Sqrt(2), 0, -2 / math.Sqrt(2)}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %v", tt.baseline, tt.rewards), func(t *testing.T) {
			g := group(tt.rewards...)
			groups.NewRule(groups.Config{Keep: "all", Baseline: tt.baseline}).Apply(g)
			for i, r := range g.Rollouts {
				if math.Abs(r.Advantage-tt.want[i]) > 1e-5 {
					t.Fatalf("member %d advantage %g, want %g", i, r.Advantage, tt.want[i])
				}
			}
		})
	}
}

func TestCollectorEmitsWholeGroupsAndForgetsThem(t *testing.T) {
	c := groups.NewCollector()
	tasks := []*pipeline.Task{{Index: 0}, {Index: 1}}
	order := [][2]int{{0, 2}, {1, 0}, {0, 0}, {1, 1}, {0, 1}, {1, 2}}
	var done []int64
	for _, o := range order {
		g, err := c.Add(&pipeline.Rollout{Task: tasks[o[0]], RolloutIndex: o[1], GroupSize: 3})
		if err != nil {
			t.Fatal(err)
		}
		if g != nil {
			for i, r := range g.Rollouts {
				if r.RolloutIndex != i {
					t.Fatalf("member %d has index %d", i, r.RolloutIndex)
				}
			}
			done = append(done, g.Key.TaskIndex)
		}
	}
	if fmt.Sprint(done) != "[0 1]" || c.Pending() != 0 {
		t.Fatalf("groups done %v, %d pending", done, c.Pending())
	}
	if _, err := c.Add(&pipeline.Rollout{Task: tasks[0], RolloutIndex: 3, GroupSize: 3}); err == nil {
		t.Fatal("an index outside the group should fail")
	}
	c.Add(&pipeline.Rollout{Task: tasks[0], RolloutIndex: 1, GroupSize: 3, Attempt: 1})
	if _, err := c.Add(&pipeline.Rollout{Task: tasks[0], RolloutIndex: 1, GroupSize: 3, Attempt: 1}); err == nil {
		t.Fatal("a member resolved twice should fail")
	}
}

// TestDropErrors: with DropErrors a failed member drops its group under
// every rule, keep: all included; without errors nothing changes.
func TestDropErrors(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		keep    string
		rewards []float64
		kept    bool
		reason  string
	}{
		{"all", []float64{1, nan}, false, groups.ReasonError},
		{"all", []float64{1, 0}, true, ""},
		{"nonzero_std", []float64{1, 0, nan}, false, groups.ReasonError},
		{"nonzero_std", []float64{1, 1}, false, groups.ReasonZeroStd},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.keep, tt.rewards), func(t *testing.T) {
			g := group(tt.rewards...)
			rule := groups.NewRule(groups.Config{Keep: tt.keep})
			rule.DropErrors = true
			rule.Apply(g)
			if g.Kept != tt.kept || g.FilterReason != tt.reason {
				t.Fatalf("kept %v reason %q, want %v %q", g.Kept, g.FilterReason, tt.kept, tt.reason)
			}
		})
	}
}

// TestStopEndsAdmission: after Stop, Next returns ActDone at once, also to
// a caller already waiting.
func TestStopEndsAdmission(t *testing.T) {
	c := groups.NewController(groups.Config{Keep: "all", MaxAttempts: 1}, 1, 0, nil)
	ctx := context.Background()
	if act, _, err := c.Next(ctx); err != nil || act != groups.ActRead {
		t.Fatalf("first Next: %v %v", act, err)
	}
	c.ReadDone(&pipeline.Task{})
	done := make(chan groups.Action)
	go func() { act, _, _ := c.Next(ctx); done <- act }() // waits: one group in flight of one
	select {
	case act := <-done:
		t.Fatalf("Next returned %v with the budget spent", act)
	case <-time.After(20 * time.Millisecond):
	}
	c.Stop()
	select {
	case act := <-done:
		if act != groups.ActDone {
			t.Fatalf("after Stop: %v, want ActDone", act)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not wake Next")
	}
	if act, _, _ := c.Next(ctx); act != groups.ActDone {
		t.Fatalf("Next after Stop: %v", act)
	}
}
