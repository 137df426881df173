package jsonl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/nemogym"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
)

// The sink contract.
var (
	_ sinks.Sink      = (*Writer)(nil)
	_ sinks.GroupSink = (*Writer)(nil)
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
	// params and addSeed are the run's request overrides, for rows
	// decoded from records (which carry neither).
	params  map[string]any
	addSeed bool
}

// Overrides gives the rows Write and WriteGroups write the run's request
// parameters (generate.params) and says whether their seeds go into their
// responses_create_params (repeat.add_seed, Gym's num_repeats_add_seed),
// so that their responses_create_params are what Gym was sent; rows
// passed to WriteGroup keep their own.
func (w *Writer) Overrides(params map[string]any, addSeed bool) {
	w.params, w.addSeed = params, addSeed
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
		r.GymSeed = w.addSeed
	}
	return w.WriteGroup(ctx, &pipeline.Group{Rollouts: rs})
}

// WriteGroups writes one line per rollout of gs as the output records it:
// the lines Write writes for the record collate makes of gs, byte for
// byte, from the rollouts themselves (no record is decoded). A line thus
// holds what the output's row holds: the task is its input row (the task
// column; not the tools and parameters parsed from it), strings are valid UTF-8 as the string
// columns hold them, and the request parameters and seeds are the run's
// (Overrides). One field differs: response.created_at is the rollout's
// start (the output's columns hold none, so Write writes 0).
func (w *Writer) WriteGroups(ctx context.Context, gs []*pipeline.Group) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tasks := map[*pipeline.Task]*pipeline.Task{}
	for _, g := range gs {
		for _, r := range g.Rollouts {
			if r == nil {
				continue
			}
			v := w.recorded(r, tasks)
			line, err := NewLine(v)
			if err != nil {
				return fmt.Errorf("jsonl: %s: %w", r, err)
			}
			if err := w.enc.Encode(line); err != nil {
				return fmt.Errorf("jsonl: %s: %w", r, err)
			}
		}
	}
	return nil
}

// recorded returns r as its output row holds it (what schema.Rollouts
// decodes of it), for the fields a line reads: a copy whose task is its
// index and input row, with its strings as the
// string columns hold them and the run's overrides. tasks keeps the
// reduced task of each task already seen.
func (w *Writer) recorded(r *pipeline.Rollout, tasks map[*pipeline.Task]*pipeline.Task) *pipeline.Rollout {
	v := *r
	t, ok := tasks[r.Task]
	if !ok {
		t = &pipeline.Task{}
		if r.Task != nil {
			t.Index = r.Task.Index
			if raw := schema.ValidUTF8Bytes(r.Task.Raw); len(raw) > 0 {
				t.Raw = json.RawMessage(raw)
			}
		}
		tasks[r.Task] = t
	}
	v.Task = t
	v.ConfigParams = w.params
	v.GymSeed = w.addSeed
	v.RunID, v.TrajID, v.Env, v.Model = schema.ValidUTF8(v.RunID), schema.ValidUTF8(v.TrajID), schema.ValidUTF8(v.Env), schema.ValidUTF8(v.Model)
	v.Status = pipeline.Status(schema.ValidUTF8(string(v.Status)))
	v.Error, v.ErrorClass, v.FinishReason = schema.ValidUTF8(v.Error), schema.ValidUTF8(v.ErrorClass), schema.ValidUTF8(v.FinishReason)
	v.Metrics = validKeys(v.Metrics)
	v.Messages = validMessages(v.Messages)
	return &v
}

// validKeys returns m with its keys as the metrics column holds them
// (sorted, made valid UTF-8; of keys that become equal the last in order
// wins, as the decoder has it); m itself when every key is valid.
func validKeys(m map[string]float64) map[string]float64 {
	bad := false
	for k := range m {
		if !utf8.ValidString(k) {
			bad = true
			break
		}
	}
	if !bad {
		return m
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make(map[string]float64, len(m))
	for _, k := range keys {
		out[schema.ValidUTF8(k)] = m[k]
	}
	return out
}

// validMessages returns msgs with their strings as the messages column
// holds them; msgs itself when every one is valid.
func validMessages(msgs []pipeline.Message) []pipeline.Message {
	valid := func(m *pipeline.Message) bool {
		ok := utf8.ValidString(m.Role) && utf8.ValidString(m.Content) &&
			utf8.ValidString(m.ToolCallID) && utf8.ValidString(m.Name)
		for _, tc := range m.ToolCalls {
			ok = ok && utf8.ValidString(tc.ID) && utf8.ValidString(tc.Type) &&
				utf8.ValidString(tc.Name) && utf8.ValidString(tc.Arguments)
		}
		for _, p := range m.Parts {
			ok = ok && utf8.ValidString(p.Type) && utf8.ValidString(p.Text) && utf8.ValidString(p.ImageURL)
		}
		return ok
	}
	i := 0
	for i < len(msgs) && valid(&msgs[i]) {
		i++
	}
	if i == len(msgs) {
		return msgs
	}
	out := slices.Clone(msgs)
	for j := i; j < len(out); j++ {
		m := &out[j]
		m.Role, m.Content = schema.ValidUTF8(m.Role), schema.ValidUTF8(m.Content)
		m.ToolCallID, m.Name = schema.ValidUTF8(m.ToolCallID), schema.ValidUTF8(m.Name)
		if len(m.ToolCalls) > 0 {
			m.ToolCalls = slices.Clone(m.ToolCalls)
			for k := range m.ToolCalls {
				tc := &m.ToolCalls[k]
				tc.ID, tc.Type, tc.Name, tc.Arguments = schema.ValidUTF8(tc.ID), schema.ValidUTF8(tc.Type), schema.ValidUTF8(tc.Name), schema.ValidUTF8(tc.Arguments)
			}
		}
		if len(m.Parts) > 0 {
			m.Parts = slices.Clone(m.Parts)
			for k := range m.Parts {
				p := &m.Parts[k]
				p.Type, p.Text, p.ImageURL = schema.ValidUTF8(p.Type), schema.ValidUTF8(p.Text), schema.ValidUTF8(p.ImageURL)
			}
		}
	}
	return out
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
