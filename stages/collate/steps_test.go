package collate_test

import (
	"reflect"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/collate"
)

func stepGroup() *pipeline.Group {
	obs := "grid"
	prompt := `[{"role":"user","content":"go"}]`
	r := &pipeline.Rollout{RunID: "run1", Task: &pipeline.Task{Index: 4}, Attempt: 1, RolloutIndex: 2, GroupID: "g", TrajID: "t",
		Reward: 2, NumTurns: 2,
		Steps: []pipeline.Step{
			{PromptTokenIDs: []int32{1, 2}, ResponseTokenIDs: []int32{3}, Logprobs: []float32{-0.5}, Reward: 1, ActionValid: true,
				Anchor: &obs, AnchorGroup: 3, AnchorGroupSize: 2, AnchorMean: 0.5, AnchorStd: 1, Return: 2, Advantage: 1.5,
				EpisodeAdvantage: 0.25, JointAdvantage: 1.75, RawPrompt: &prompt},
			{PromptTokenIDs: []int32{4}, ResponseTokenIDs: []int32{5, 6}, Logprobs: []float32{-1}, AnchorGroup: -1},
		}}
	return &pipeline.Group{Rollouts: []*pipeline.Rollout{nil, r}}
}

func TestStepRows(t *testing.T) {
	rows := collate.StepRows(nil, []*pipeline.Group{stepGroup()})
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	for _, tt := range []struct {
		name      string
		got, want any
	}{
		{"keys", []any{rows[0].RunID, rows[0].TaskIndex, rows[0].Attempt, rows[0].RolloutIndex, rows[0].GroupID, rows[0].TrajID}, []any{"run1", int64(4), int32(1), int32(2), "g", "t"}},
		{"steps numbered from 1", []int32{rows[0].Step, rows[1].Step}, []int32{1, 2}},
		{"episode", []any{rows[1].EpisodeReward, rows[1].EpisodeLength}, []any{2.0, int32(2)}},
		{"anchor group id", *rows[0].AnchorGroupID, "g/a3"},
		{"no anchor, no anchor group id", rows[1].AnchorGroupID == nil && rows[1].AnchorObs == nil, true},
		{"loss mask all ones", [][]int8{rows[0].LossMask, rows[1].LossMask}, [][]int8{{1}, {1, 1}}},
		{"logprobs kept", rows[0].ResponseLogprobs, []float32{-0.5}},
		{"logprobs not one per token are zeros", rows[1].ResponseLogprobs, []float32{0, 0}},
	} {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if got := collate.StepRows(rows[:0], nil); len(got) != 0 {
		t.Errorf("no groups: %d rows", len(got))
	}
}

// StepRows fills every column of the step table (schema.StepRow's fields)
// from a step that sets every value.
func TestStepRowsFillEveryColumn(t *testing.T) {
	rows := collate.StepRows(nil, []*pipeline.Group{stepGroup()})
	v := reflect.ValueOf(rows[0])
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("StepRows never fills %s", v.Type().Field(i).Name)
		}
	}
}
