package report

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
)

// Limits of what one sampled trajectory puts into the page.
const (
	maxContentChars = 16_000 // per message, per tool call's arguments, for the task's JSON
	readBatchRows   = 64     // rows per batch when reading every column
)

// sampleView is one sampled trajectory as the page shows it (JSON).
type sampleView struct {
	Kind             string            `json:"kind"`
	RunID            string            `json:"run_id"`
	TaskIndex        int64             `json:"task_index"`
	Attempt          int               `json:"attempt"`
	RolloutIndex     int               `json:"rollout_index"`
	TrajID           string            `json:"traj_id"`
	Env              string            `json:"env"`
	Model            string            `json:"model"`
	Status           string            `json:"status"`
	ErrorClass       string            `json:"error_class,omitempty"`
	Error            string            `json:"error,omitempty"`
	FinishReason     string            `json:"finish_reason"`
	Reward           number            `json:"reward"`
	Advantage        number            `json:"advantage"`
	Metrics          map[string]number `json:"metrics,omitempty"`
	Kept             bool              `json:"kept"`
	NumTurns         int               `json:"num_turns"`
	PromptTokens     int               `json:"prompt_tokens"`
	CompletionTokens int               `json:"completion_tokens"`
	Task             string            `json:"task"`
	Messages         []messageView     `json:"messages"`
	// The token view: prompt_token_ids, then response_token_ids with
	// their loss_mask, cut after Options.MaxTokens ids in all.
	PromptIDs   []int32 `json:"prompt_ids"`
	ResponseIDs []int32 `json:"response_ids"`
	LossMask    []int8  `json:"loss_mask"`
	TokensCut   int     `json:"tokens_cut"` // ids left out
}

type messageView struct {
	Role       string         `json:"role"`
	Content    string         `json:"content"`
	Name       string         `json:"name,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	Turn       int            `json:"turn"`
	ToolCalls  []toolCallView `json:"tool_calls,omitempty"`
}

type toolCallView struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// readSamples decodes the chosen rows of files, reading only the files
// that hold one.
func readSamples(ctx context.Context, files []string, chosen []candidate, opts Options) ([]sampleView, error) {
	var out []sampleView
	for fi, path := range files {
		var want []candidate
		for _, c := range chosen {
			if c.file == fi {
				want = append(want, c)
			}
		}
		if len(want) == 0 {
			continue
		}
		views, err := readFileSamples(ctx, path, want, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, views...)
	}
	return out, nil
}

// readFileSamples decodes the rows want (sorted by row) of one file.
func readFileSamples(ctx context.Context, path string, want []candidate, opts Options) ([]sampleView, error) {
	f, err := pqread.Open(path, opts.Allocator, readBatchRows)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	defer func() { _ = f.Close() }() // best effort: read only
	var out []sampleView
	first := 0
	err = f.Records(ctx, nil, func(rec arrow.Record) error {
		n := int(rec.NumRows())
		for len(want) > 0 && want[0].row < first+n {
			i := want[0].row - first
			one := rec.NewSlice(int64(i), int64(i+1))
			rs, err := schema.Rollouts(one)
			one.Release()
			if err != nil {
				return fmt.Errorf("report: %s: %w", path, err)
			}
			out = append(out, newSampleView(rs[0], want[0].kind, opts.MaxTokens))
			want = want[1:]
		}
		first += n
		if len(want) == 0 {
			return errDone
		}
		return nil
	})
	if err != nil && err != errDone {
		return nil, err
	}
	return out, nil
}

// errDone stops reading a file once its chosen rows are decoded.
var errDone = fmt.Errorf("report: done")

func newSampleView(r *pipeline.Rollout, kind string, maxTokens int) sampleView {
	v := sampleView{
		Kind: kind, RunID: r.RunID, Attempt: r.Attempt, RolloutIndex: r.RolloutIndex,
		TrajID: r.TrajID, Env: r.Env, Model: r.Model, Status: string(r.Status),
		ErrorClass: r.ErrorClass, Error: cut(r.Error), FinishReason: r.FinishReason,
		Reward: number(r.Reward), Advantage: number(r.Advantage), Metrics: numbers(r.Metrics), Kept: r.Kept,
		NumTurns: r.NumTurns, PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens,
		Messages: []messageView{},
	}
	if r.Task != nil {
		v.TaskIndex = r.Task.Index
		v.Task = cut(string(r.Task.Raw))
	}
	for _, m := range r.Messages {
		mv := messageView{Role: m.Role, Content: cut(m.Content), Name: m.Name, ToolCallID: m.ToolCallID, Turn: m.Turn}
		for _, tc := range m.ToolCalls {
			mv.ToolCalls = append(mv.ToolCalls, toolCallView{ID: tc.ID, Name: tc.Name, Arguments: cut(tc.Arguments)})
		}
		v.Messages = append(v.Messages, mv)
	}
	budget := maxTokens
	take := func(n int) int {
		k := min(n, max(budget, 0))
		budget -= k
		v.TokensCut += n - k
		return k
	}
	v.PromptIDs = append([]int32{}, r.PromptTokenIDs[:take(len(r.PromptTokenIDs))]...)
	k := take(len(r.ResponseTokenIDs))
	v.ResponseIDs = append([]int32{}, r.ResponseTokenIDs[:k]...)
	v.LossMask = make([]int8, k)
	copy(v.LossMask, r.LossMask) // a short mask leaves 0s (observation)
	return v
}

// cut shortens s to maxContentChars bytes (at a rune boundary), saying so.
func cut(s string) string {
	if len(s) <= maxContentChars {
		return s
	}
	n := maxContentChars
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("… [%d more bytes]", len(s)-n)
}

// number is a float64 that encodes as JSON null when it is not finite (a
// file another writer made may hold one; JSON cannot).
type number float64

func (n number) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

func numbers(m map[string]float64) map[string]number {
	if m == nil {
		return nil
	}
	out := make(map[string]number, len(m))
	for k, v := range m {
		out[k] = number(v)
	}
	return out
}
