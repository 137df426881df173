package serve

import (
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/collate"
)

// A group's tokens for the ranks' slices: prompt ids and total_tokens
// where the training view is known; the server's completion_tokens where
// total_tokens is null (a reply without token ids), never 0.
func TestGroupTokens(t *testing.T) {
	row := func(prompt, resp, completion int, missing bool) *pipeline.Rollout {
		mask := make([]int8, resp)
		return &pipeline.Rollout{Task: &pipeline.Task{Index: 0}, PromptTokenIDs: make([]int32, prompt),
			ResponseTokenIDs: make([]int32, resp), LossMask: mask, ResponseLogprobs: make([]float32, resp),
			CompletionTokens: completion, TokenIDsMissing: missing}
	}
	tests := []struct {
		name string
		rows []*pipeline.Rollout
		want int64
	}{
		{"known", []*pipeline.Rollout{row(10, 5, 5, false), row(10, 7, 7, false)}, 32},
		{"unknown", []*pipeline.Rollout{row(0, 0, 64, true), row(0, 0, 30, true)}, 94},
		{"mixed", []*pipeline.Rollout{row(10, 5, 5, false), row(0, 0, 64, true)}, 79},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer alloc.AssertSize(t, 0)
			c := collate.New(alloc, 100)
			defer c.Release()
			c.Add(&pipeline.Group{Rollouts: tt.rows})
			rec := c.Flush()
			defer rec.Release()
			if got := groupTokens([]arrow.Record{rec}); got != tt.want {
				t.Errorf("groupTokens = %d, want %d", got, tt.want)
			}
		})
	}
}
