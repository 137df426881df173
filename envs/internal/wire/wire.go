package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
)

// Message is a message as sent to an environment: pipeline.Message without
// token ids, logprobs and turn.
// Its content is a string, or, for a message with images (Parts), a list
// of OpenAI content parts: {"type": "text", "text"} and {"type":
// "image_url", "image_url": {"url"}}. Environments may answer either
// shape (the Responses API's input_text and input_image parts too).
type Message struct {
	Role       string              `json:"role"`
	Content    string              `json:"content"`
	ToolCalls  []pipeline.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string              `json:"tool_call_id,omitempty"`
	Name       string              `json:"name,omitempty"`
	// Parts are the content parts of a message with images; nil for text.
	Parts []pipeline.ContentPart `json:"-"`
}

// messageJSON is Message's JSON shape with its content left raw.
type messageJSON struct {
	Role       string              `json:"role"`
	Content    json.RawMessage     `json:"content"`
	ToolCalls  []pipeline.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string              `json:"tool_call_id,omitempty"`
	Name       string              `json:"name,omitempty"`
}

// MarshalJSON writes the content as a string, or as content parts when
// the message holds images.
func (m Message) MarshalJSON() ([]byte, error) {
	j := messageJSON{Role: m.Role, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Name: m.Name}
	var err error
	if len(m.Parts) == 0 {
		j.Content, err = json.Marshal(m.Content)
	} else {
		j.Content, err = json.Marshal(pipeline.ChatParts(m.Parts))
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads a message strictly (no unknown keys); its content
// is a string, null or a list of content parts (pipeline.DecodeContent).
func (m *Message) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var j messageJSON
	if err := dec.Decode(&j); err != nil {
		return err
	}
	var v any
	if len(bytes.TrimSpace(j.Content)) > 0 {
		if err := json.Unmarshal(j.Content, &v); err != nil {
			return err
		}
	}
	text, parts, err := pipeline.DecodeContent(v, "content")
	if err != nil {
		return err
	}
	*m = Message{Role: j.Role, Content: text, Parts: parts, ToolCalls: j.ToolCalls, ToolCallID: j.ToolCallID, Name: j.Name}
	return nil
}

// FromMessage strips m to its wire form.
func FromMessage(m pipeline.Message) Message {
	return Message{Role: m.Role, Content: m.Content, Parts: m.Parts, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Name: m.Name}
}

// FromMessages strips every message to its wire form.
func FromMessages(ms []pipeline.Message) []Message {
	out := make([]Message, len(ms))
	for i, m := range ms {
		out[i] = FromMessage(m)
	}
	return out
}

// ResetRequest starts a trajectory. ID and Op are set by the subprocess
// protocol only.
type ResetRequest struct {
	ID       int64           `json:"id,omitempty"`
	Op       string          `json:"op,omitempty"`
	TrajID   string          `json:"traj_id"`
	Seed     int64           `json:"seed"`
	Task     json.RawMessage `json:"task"`
	Messages []Message       `json:"messages"`
}

// StepRequest answers one turn. ID and Op are set by the subprocess
// protocol only.
type StepRequest struct {
	ID       int64           `json:"id,omitempty"`
	Op       string          `json:"op,omitempty"`
	TrajID   string          `json:"traj_id"`
	State    json.RawMessage `json:"state"`
	Action   Message         `json:"action"`
	Messages []Message       `json:"messages"`
}

// NewReset builds the reset request of r.
func NewReset(r *pipeline.Rollout) (*ResetRequest, error) {
	task, err := TaskJSON(r.Task)
	if err != nil {
		return nil, err
	}
	return &ResetRequest{TrajID: r.TrajID, Seed: r.Seed, Task: task, Messages: FromMessages(r.Messages)}, nil
}

// NewStep builds the step request of r answering action.
func NewStep(r *pipeline.Rollout, action pipeline.Message) (*StepRequest, error) {
	state, err := StateJSON(r.State)
	if err != nil {
		return nil, err
	}
	return &StepRequest{TrajID: r.TrajID, State: state, Action: FromMessage(action), Messages: FromMessages(r.Messages)}, nil
}

// TaskJSON is the task's row as a JSON object: its raw bytes when known,
// else its decoded fields, else {}.
func TaskJSON(t *pipeline.Task) (json.RawMessage, error) {
	if t == nil {
		return json.RawMessage("{}"), nil
	}
	if raw := bytes.TrimSpace(t.Raw); len(raw) > 0 && json.Valid(raw) {
		return raw, nil
	}
	if t.Fields == nil {
		return json.RawMessage("{}"), nil
	}
	b, err := json.Marshal(t.Fields)
	if err != nil {
		return nil, fmt.Errorf("task %s: fields are not JSON: %w", t.Source, err)
	}
	return b, nil
}

// StateJSON encodes a rollout's state: json.RawMessage as is, nil as null,
// anything else through encoding/json.
func StateJSON(s any) (json.RawMessage, error) {
	switch v := s.(type) {
	case nil:
		return json.RawMessage("null"), nil
	case json.RawMessage:
		if len(v) == 0 {
			return json.RawMessage("null"), nil
		}
		return v, nil
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("state is not JSON: %w", err)
		}
		return b, nil
	}
}

// Response is an environment's answer to a reset or a step.
type Response struct {
	// ID echoes the request's id (subprocess protocol); nil when absent.
	ID *int64 `json:"id"`
	// Error, when present, fails the call with its text.
	Error        *string           `json:"error"`
	Observations []Message         `json:"observations"`
	Tools        []json.RawMessage `json:"tools"`
	// State is the raw state; nil when the key is absent (state kept),
	// "null" when it was sent as null (state cleared).
	State      json.RawMessage    `json:"state"`
	Reward     float64            `json:"reward"`
	Terminated bool               `json:"terminated"`
	Truncated  bool               `json:"truncated"`
	Metrics    map[string]float64 `json:"metrics"`
	Stop       []string           `json:"stop"`
	// IsActionValid is the environment's judgement of the action (step
	// responses); nil when absent (the action counts as valid).
	IsActionValid *bool `json:"is_action_valid"`
	// Anchor is the anchor observation of the state the response leaves
	// the trajectory in: a string as is, any other JSON value as compact
	// JSON; absent or null: none.
	Anchor json.RawMessage `json:"anchor"`
}

// RoleEnvironment is the role NeMo RL's environments give their
// observations. Chat templates know no such role (Qwen3's drops the
// message), so an observation with it is read as the user's.
const RoleEnvironment = "environment"

// ErrEnv marks an error the environment reported itself ({"error": ...}).
var ErrEnv = errors.New("environment error")

// Decode reads one response object strictly: one JSON object, no unknown
// keys, nothing after it, roles known (no role and "environment" read as
// "user"), numbers finite.
func Decode(data []byte) (*Response, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Response
	if err := dec.Decode(&r); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty response")
		}
		return nil, fmt.Errorf("not a response object: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a response object: data after the JSON object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not a response object: data after the JSON object")
	}
	for i := range r.Observations {
		switch r.Observations[i].Role {
		case "", RoleEnvironment:
			// No role, or NeMo RL's "environment": the user's turn, as a
			// chat template renders an environment's text.
			r.Observations[i].Role = pipeline.RoleUser
		case pipeline.RoleUser, pipeline.RoleTool, pipeline.RoleSystem, pipeline.RoleAssistant:
		default:
			return nil, fmt.Errorf("observations[%d].role: unknown role %q", i, r.Observations[i].Role)
		}
	}
	for i, t := range r.Tools {
		if !bytes.HasPrefix(bytes.TrimSpace(t), []byte("{")) {
			return nil, fmt.Errorf("tools[%d]: not a JSON object", i)
		}
	}
	if math.IsNaN(r.Reward) || math.IsInf(r.Reward, 0) {
		return nil, errors.New("reward: not a finite number")
	}
	if _, err := anchorText(r.Anchor); err != nil {
		return nil, err
	}
	return &r, nil
}

// anchorText is an anchor's text: a JSON string's value, another value's
// compact JSON, nil for none (absent or null).
func anchorText(raw json.RawMessage) (*string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("anchor: %w", err)
		}
		return &s, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("anchor: %w", err)
	}
	s := buf.String()
	return &s, nil
}

// Err returns the environment's own error, wrapping ErrEnv, or nil.
func (r *Response) Err() error {
	if r.Error == nil {
		return nil
	}
	msg := *r.Error
	if msg == "" {
		msg = "(no message)"
	}
	return fmt.Errorf("%w: %s", ErrEnv, msg)
}

func (r *Response) messages() []pipeline.Message {
	if len(r.Observations) == 0 {
		return nil
	}
	out := make([]pipeline.Message, len(r.Observations))
	for i, m := range r.Observations {
		out[i] = pipeline.Message{Role: m.Role, Content: m.Content, Parts: m.Parts, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Name: m.Name}
	}
	return out
}

func (r *Response) state(prev any) any {
	if r.State == nil {
		return prev
	}
	if bytes.Equal(bytes.TrimSpace(r.State), []byte("null")) {
		return nil
	}
	return r.State
}

// Reset converts a reset response; a response without state starts with a
// nil state.
func (r *Response) Reset() *envs.Reset {
	anchor, _ := anchorText(r.Anchor) // checked by Decode
	return &envs.Reset{Observations: r.messages(), Tools: r.Tools, State: r.state(nil), Anchor: anchor}
}

// Step converts a step response; a response without a state key keeps prev.
func (r *Response) Step(prev any) *envs.Step {
	anchor, _ := anchorText(r.Anchor) // checked by Decode
	return &envs.Step{
		Anchor:          anchor,
		InvalidAction:   r.IsActionValid != nil && !*r.IsActionValid,
		ReportsValidity: r.IsActionValid != nil,
		Observations:    r.messages(),
		Reward:          r.Reward,
		Terminated:      r.Terminated,
		Truncated:       r.Truncated,
		Metrics:         r.Metrics,
		StopStrings:     r.Stop,
		State:           r.state(prev),
	}
}
