package jsonl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
	"io"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/pipeline"
)

// The sink contract.
var (
	_ sinks.Sink = (*Writer)(nil)
)

// Line is one JSON line.
type Line struct {
	TaskIndex             int64              `json:"_ng_task_index"`
	RolloutIndex          int                `json:"_ng_rollout_index"`
	Attempt               int                `json:"attempt"`
	Reward                float64            `json:"reward"`
	ResponsesCreateParams Params             `json:"responses_create_params"`
	Response              Response           `json:"response"`
	Status                string             `json:"status"`
	Error                 string             `json:"error,omitempty"`
	ErrorClass            string             `json:"error_class,omitempty"`
	FinishReason          string             `json:"finish_reason,omitempty"`
	Metrics               map[string]float64 `json:"metrics,omitempty"`
	TurnRewards           []float64          `json:"turn_rewards,omitempty"`
	NumTurns              int                `json:"num_turns"`
	RunID                 string             `json:"run_id,omitempty"`
	TrajID                string             `json:"traj_id,omitempty"`
	Seed                  int64              `json:"seed"`
	Model                 string             `json:"model,omitempty"`
	Env                   string             `json:"env,omitempty"`
	Task                  json.RawMessage    `json:"task,omitempty"`
}

// Params holds the request's input messages.
type Params struct {
	Input []Message `json:"input"`
}

// Response holds the messages after the prompt.
type Response struct {
	Output []Message `json:"output"`
}

// Message is a chat message without token data.
type Message struct {
	Role       string              `json:"role"`
	Content    string              `json:"content"`
	ToolCalls  []pipeline.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string              `json:"tool_call_id,omitempty"`
	Name       string              `json:"name,omitempty"`
}

// NewLine builds the line of one rollout.
func NewLine(r *pipeline.Rollout) Line {
	l := Line{
		RolloutIndex:          r.RolloutIndex,
		Attempt:               r.Attempt,
		Reward:                r.Reward,
		Status:                string(r.Status),
		Error:                 r.Error,
		ErrorClass:            r.ErrorClass,
		FinishReason:          r.FinishReason,
		Metrics:               r.Metrics,
		TurnRewards:           r.TurnRewards,
		NumTurns:              r.NumTurns,
		RunID:                 r.RunID,
		TrajID:                r.TrajID,
		Seed:                  r.Seed,
		Model:                 r.Model,
		Env:                   r.Env,
		ResponsesCreateParams: Params{Input: []Message{}},
		Response:              Response{Output: []Message{}},
	}
	if r.Task != nil {
		l.TaskIndex = r.Task.Index
		if json.Valid(r.Task.Raw) {
			l.Task = r.Task.Raw
		}
	}
	for _, m := range r.Messages {
		msg := Message{Role: m.Role, Content: m.Content, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.Turn == 0 {
			l.ResponsesCreateParams.Input = append(l.ResponsesCreateParams.Input, msg)
		} else {
			l.Response.Output = append(l.Response.Output, msg)
		}
	}
	return l
}

// Writer writes lines to an io.Writer. It is not safe for concurrent use.
type Writer struct {
	bw  *bufio.Writer
	enc *json.Encoder
}

// New returns a Writer into out. Close flushes but does not close out.
func New(out io.Writer) *Writer {
	bw := bufio.NewWriterSize(out, 1<<16)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return &Writer{bw: bw, enc: enc}
}

// WriteGroup writes one line per rollout of g.
func (w *Writer) WriteGroup(ctx context.Context, g *pipeline.Group) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, r := range g.Rollouts {
		if r == nil {
			continue
		}
		if err := w.enc.Encode(NewLine(r)); err != nil {
			return fmt.Errorf("jsonl: %s: %w", r, err)
		}
	}
	return nil
}

// Write writes one line per row of rec, a record in the collate schema.
// The caller keeps ownership of rec.
func (w *Writer) Write(ctx context.Context, rec arrow.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rs, err := schema.Rollouts(rec)
	if err != nil {
		return fmt.Errorf("jsonl: %w", err)
	}
	return w.WriteGroup(ctx, &pipeline.Group{Rollouts: rs})
}

// Close flushes buffered lines.
func (w *Writer) Close(ctx context.Context) error {
	_ = ctx
	if w.bw == nil {
		return errors.New("jsonl: Close called twice")
	}
	err := w.bw.Flush()
	w.bw = nil
	return err
}
