package jsonl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/nemogym"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
)

// The sink contract.
var (
	_ sinks.Sink = (*Writer)(nil)
)

// TrajflowKey is the key of trajflow's own fields in a line.
const TrajflowKey = "trajflow"

// Trajflow is trajflow's own part of a line: what NeMo Gym's rollout shape
// has no field for.
type Trajflow struct {
	RunID        string             `json:"run_id,omitempty"`
	TrajID       string             `json:"traj_id,omitempty"`
	Attempt      int                `json:"attempt"`
	Seed         int64              `json:"seed"`
	Model        string             `json:"model,omitempty"`
	Env          string             `json:"env,omitempty"`
	Status       string             `json:"status"`
	Error        string             `json:"error,omitempty"`
	ErrorClass   string             `json:"error_class,omitempty"`
	FinishReason string             `json:"finish_reason,omitempty"`
	Metrics      map[string]float64 `json:"metrics,omitempty"`
	TurnRewards  []float64          `json:"turn_rewards,omitempty"`
	NumTurns     int                `json:"num_turns"`
}

// NewLine builds the line of one rollout in NeMo Gym's rollout shape: the
// input row's fields, responses_create_params as sent (the row's own with
// the rollout's ConfigParams and seed laid over them, nemogym.Request),
// _ng_task_index, _ng_rollout_index, agent_ref, reward, the Responses API
// response (package nemogym), and trajflow's own fields under "trajflow".
func NewLine(r *pipeline.Rollout) (map[string]any, error) {
	line, err := nemogym.Request(r)
	if err != nil {
		return nil, err
	}
	created := r.Started
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	line[nemogym.ResponseKey] = nemogym.Response(r, nil, line[nemogym.ParamsKey].(map[string]any), created)
	line[nemogym.RewardKey] = r.Reward
	line[TrajflowKey] = Trajflow{
		RunID: r.RunID, TrajID: r.TrajID, Attempt: r.Attempt, Seed: r.Seed, Model: r.Model, Env: r.Env,
		Status: string(r.Status), Error: r.Error, ErrorClass: r.ErrorClass, FinishReason: r.FinishReason,
		Metrics: r.Metrics, TurnRewards: r.TurnRewards, NumTurns: r.NumTurns,
	}
	return line, nil
}

// Writer writes lines to an io.Writer. It is not safe for concurrent use.
type Writer struct {
	bw  *bufio.Writer
	enc *json.Encoder
	// params and sendSeed are the run's request overrides, for rows
	// decoded from records (which carry neither).
	params   map[string]any
	sendSeed bool
}

// Overrides gives the rows Write decodes the run's request parameters
// (generate.params) and says whether their seeds were sent (repeat.seed
// set, or the row's own seed), so that their responses_create_params are
// what the requests carried; rows passed to WriteGroup keep their own.
func (w *Writer) Overrides(params map[string]any, sendSeed bool) {
	w.params, w.sendSeed = params, sendSeed
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
		line, err := NewLine(r)
		if err != nil {
			return fmt.Errorf("jsonl: %s: %w", r, err)
		}
		if err := w.enc.Encode(line); err != nil {
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
	for _, r := range rs {
		r.ConfigParams = w.params
		// A row's own seed is in its responses_create_params already.
		r.NoSeed = !w.sendSeed
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
