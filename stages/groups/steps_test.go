package groups_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/groups"
)

func stepsOf(anchors []string, rewards []float64) []pipeline.Step {
	out := make([]pipeline.Step, len(rewards))
	for i := range rewards {
		out[i].Reward = rewards[i]
		if anchors[i] != "" {
			a := anchors[i]
			out[i].Anchor = &a
		}
	}
	return out
}

// TestStepStats checks returns, anchor groups and advantages against
// values worked out by hand from GiGPO's definitions.
func TestStepStats(t *testing.T) {
	g := &pipeline.Group{Rollouts: []*pipeline.Rollout{
		{Status: pipeline.StatusOK, Steps: stepsOf([]string{"A", "B", "C"}, []float64{0, 0, 1})},
		{Status: pipeline.StatusOK, Steps: stepsOf([]string{"A", "B"}, []float64{-0.5, 0})},
		{Status: pipeline.StatusOK, Steps: stepsOf([]string{"A", ""}, []float64{0, 1})},
		{Status: pipeline.StatusError, Steps: stepsOf([]string{"A"}, []float64{5})},
	}}
	groups.StepStats(g, groups.StepParams{Gamma: 0.5, Mode: groups.StepMeanNorm, W: 1})
	type want struct {
		ret            float64
		group, size    int
		mean, std, adv float64
	}
	// Returns with gamma 0.5: rollout 0: 0.25, 0.5, 1; rollout 1: -0.5, 0;
	// rollout 2: 0.5, 1. Anchor A: {0.25, -0.5, 0.5}: mean 1/12, std
	// sqrt(((1/6)^2 + (7/12)^2 + (5/12)^2) / 2).
	meanA := (0.25 - 0.5 + 0.5) / 3
	stdA := math.Sqrt((math.Pow(0.25-meanA, 2) + math.Pow(-0.5-meanA, 2) + math.Pow(0.5-meanA, 2)) / 2)
	meanB := 0.25
	stdB := math.Sqrt((math.Pow(0.5-meanB, 2) + math.Pow(0-meanB, 2)) / 1)
	wants := [][]want{
		{{0.25, 0, 3, meanA, stdA, 0.25 - meanA}, {0.5, 1, 2, meanB, stdB, 0.5 - meanB}, {1, 2, 1, 1, 1, 0}},
		{{-0.5, 0, 3, meanA, stdA, -0.5 - meanA}, {0, 1, 2, meanB, stdB, -meanB}},
		{{0.5, 0, 3, meanA, stdA, 0.5 - meanA}, {1, -1, 1, 1, 1, 0}},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	for ri, ws := range wants {
		for si, w := range ws {
			st := g.Rollouts[ri].Steps[si]
			if !near(st.Return, w.ret) || st.AnchorGroup != w.group || st.AnchorGroupSize != w.size ||
				!near(st.AnchorMean, w.mean) || !near(st.AnchorStd, w.std) || !near(st.Advantage, w.adv) {
				t.Errorf("rollout %d step %d = %+v, want %+v", ri, si, st, w)
			}
		}
	}
	if st := g.Rollouts[3].Steps[0]; st.AnchorGroupSize != 0 || st.Return != 0 {
		t.Errorf("a failed rollout's step got statistics: %+v", st)
	}
	groups.StepStats(g, groups.StepParams{Gamma: 0.5, Mode: groups.StepMeanStdNorm, W: 1})
	if st := g.Rollouts[0].Steps[0]; !near(st.Advantage, (0.25-meanA)/(stdA+1e-6)) {
		t.Errorf("mean_std_norm advantage %v", st.Advantage)
	}
}

// Two rollouts of a group meet in state B: their steps there form one
// anchor group, whose mean return is their baseline. A step alone in its
// anchor group has no baseline to compare with: its step advantage is 0.
func ExampleStepStats() {
	a, b, c := "A", "B", "C"
	g := &pipeline.Group{Rollouts: []*pipeline.Rollout{
		{Status: pipeline.StatusOK, Steps: []pipeline.Step{{Anchor: &a}, {Anchor: &b, Reward: 1}}},
		{Status: pipeline.StatusOK, Steps: []pipeline.Step{{Anchor: &c}, {Anchor: &b}}},
	}}
	groups.StepStats(g, groups.StepParams{Gamma: 0.9, Mode: groups.StepMeanNorm, W: 1})
	for i, r := range g.Rollouts {
		for j, s := range r.Steps {
			fmt.Printf("rollout %d step %d: anchor %s group %d size %d return %.2f advantage %.2f\n",
				i, j+1, *s.Anchor, s.AnchorGroup, s.AnchorGroupSize, s.Return, s.Advantage)
		}
	}
	// Output:
	// rollout 0 step 1: anchor A group 0 size 1 return 0.90 advantage 0.00
	// rollout 0 step 2: anchor B group 1 size 2 return 1.00 advantage 0.50
	// rollout 1 step 1: anchor C group 2 size 1 return 0.00 advantage 0.00
	// rollout 1 step 2: anchor B group 1 size 2 return 0.00 advantage -0.50
}
