package collate

import (
	"strconv"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
)

// StepRows appends to dst the step table's rows (schema.StepColumns) of
// gs and returns it: one row per step of every rollout, in whole-group
// order. Anchor group ids are "GROUP_ID/aN", N the step's
// pipeline.Step.AnchorGroup; a step whose logprobs are not one per
// response token gets zeros. The rows share the rollouts' slices, and
// their loss masks (all ones) share one slice: read only.
func StepRows(dst []schema.StepRow, gs []*pipeline.Group) []schema.StepRow {
	longest := 0
	for _, g := range gs {
		for _, r := range g.Rollouts {
			if r == nil {
				continue
			}
			for i := range r.Steps {
				longest = max(longest, len(r.Steps[i].ResponseTokenIDs))
			}
		}
	}
	ones := make([]int8, longest)
	for i := range ones {
		ones[i] = 1
	}
	for _, g := range gs {
		for _, r := range g.Rollouts {
			if r == nil {
				continue
			}
			for i := range r.Steps {
				dst = append(dst, stepRow(r, i, ones))
			}
		}
	}
	return dst
}

// stepRow is step i of r as a row of the step table.
func stepRow(r *pipeline.Rollout, i int, ones []int8) schema.StepRow {
	st := &r.Steps[i]
	lp := st.Logprobs
	if len(lp) != len(st.ResponseTokenIDs) {
		lp = make([]float32, len(st.ResponseTokenIDs))
	}
	var taskIndex int64
	if r.Task != nil {
		taskIndex = r.Task.Index
	}
	row := schema.StepRow{
		RunID: r.RunID, TaskIndex: taskIndex, Attempt: int32(r.Attempt), RolloutIndex: int32(r.RolloutIndex),
		GroupID: r.GroupID, TrajID: r.TrajID, Step: int32(i + 1),
		StepReward: st.Reward, EpisodeReward: r.Reward, EpisodeLength: int32(r.NumTurns),
		IsActionValid: st.ActionValid, AnchorObs: st.Anchor,
		AnchorGroupSize: int32(st.AnchorGroupSize), AnchorReturnMean: st.AnchorMean, AnchorReturnStd: st.AnchorStd,
		StepReturn: st.Return, StepAdvantage: st.Advantage,
		EpisodeAdvantage: st.EpisodeAdvantage, JointAdvantage: st.JointAdvantage, RawPrompt: st.RawPrompt,
		PromptTokenIDs: st.PromptTokenIDs, ResponseTokenIDs: st.ResponseTokenIDs,
		LossMask: ones[:len(st.ResponseTokenIDs)], ResponseLogprobs: lp,
	}
	if st.AnchorGroup >= 0 && st.Anchor != nil {
		id := r.GroupID + "/a" + strconv.Itoa(st.AnchorGroup)
		row.AnchorGroupID = &id
	}
	return row
}
