package sources

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// RowError is a bad input row: where it is and what is wrong with it.
type RowError struct {
	// Where names the row: "tasks.jsonl:17" or "tasks.parquet:row 16".
	Where string
	// Reason says what is wrong ("invalid JSON: ...").
	Reason string
	// Err, when set, is the sentinel the reason stands for
	// (ErrLineTooLong); errors.Is sees it.
	Err error
}

func (e *RowError) Error() string { return e.Where + ": " + e.Reason }

// Unwrap returns Err.
func (e *RowError) Unwrap() error { return e.Err }

// nemoGymKey is the field of a NeMo Gym row holding the request.
const nemoGymKey = "responses_create_params"

// parseRow turns one JSON row into a task.
func parseRow(where string, index int64, row []byte) (*pipeline.Task, error) {
	dec := json.NewDecoder(bytes.NewReader(row))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &RowError{Where: where, Reason: "invalid JSON: " + jsonErr(err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		reason := "invalid JSON: more than one value on the line"
		if err != nil {
			reason = "invalid JSON: " + jsonErr(err)
		}
		return nil, &RowError{Where: where, Reason: reason}
	}
	fields, ok := v.(map[string]any)
	if !ok {
		reason := fmt.Sprintf("row is %s, want a JSON object", pipeline.JSONKind(v))
		if _, isList := v.([]any); isList {
			reason += " (JSONL holds one object per line, not a JSON array)"
		}
		return nil, &RowError{Where: where, Reason: reason}
	}
	raw, err := compactRow(row)
	if err != nil {
		return nil, &RowError{Where: where, Reason: "invalid JSON: " + jsonErr(err)}
	}
	task := &pipeline.Task{Index: index, Source: where, Raw: raw, Fields: fields}
	if err := fillTask(task); err != nil {
		return nil, &RowError{Where: where, Reason: err.Error()}
	}
	return task, nil
}

// compactRow returns a copy of a valid JSON row without insignificant
// whitespace. A row with no whitespace outside its strings (the usual JSONL
// line) is copied as it is, which is what json.Compact would produce, at a
// fraction of its cost.
func compactRow(row []byte) ([]byte, error) {
	if !spaceOutsideStrings(row) {
		return bytes.Clone(row), nil
	}
	var raw bytes.Buffer
	raw.Grow(len(row))
	if err := json.Compact(&raw, row); err != nil {
		return nil, err
	}
	return raw.Bytes(), nil
}

// spaceOutsideStrings reports whether JSON text b has a whitespace byte
// outside its string literals.
func spaceOutsideStrings(b []byte) bool {
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString && c == '\\':
			i++ // the escaped byte
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return true
		}
	}
	return false
}

// jsonErr words a decoding error without Go type names.
func jsonErr(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of JSON input"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// stopStringsKey is the row field holding the row's own stop strings, as
// NeMo RL's datums carry them.
const stopStringsKey = "stop_strings"

// fillTask sets the task's messages, params, tools and stop strings from
// its fields.
func fillTask(task *pipeline.Task) error {
	if v, ok := task.Fields[stopStringsKey]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: want a list of strings, got %s", stopStringsKey, pipeline.JSONKind(v))
		}
		for i, e := range list {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("%s[%d]: want a string, got %s", stopStringsKey, i, pipeline.JSONKind(e))
			}
			if s == "" {
				return fmt.Errorf("%s[%d]: an empty stop string", stopStringsKey, i)
			}
			task.StopStrings = append(task.StopStrings, s)
		}
	}
	if rcp, ok := task.Fields[nemoGymKey]; ok {
		return fillNeMoGym(task, rcp)
	}
	if v, ok := task.Fields["messages"]; ok && v != nil {
		msgs, err := pipeline.DecodeMessages(v, "messages")
		if err != nil {
			return err
		}
		task.Messages = msgs
	}
	// A plain row's "tools" is taken when it is a list of tool objects;
	// anything else stays a plain field.
	if list, ok := task.Fields["tools"].([]any); ok && allObjects(list) {
		tools, err := decodeTools(list, "tools")
		if err != nil {
			return err
		}
		task.Tools = tools
	}
	return nil
}

// fillNeMoGym reads a NeMo Gym row's responses_create_params: input becomes
// the messages (instructions a leading system message), tools the tools,
// every other key a request parameter (max_output_tokens as max_tokens,
// reasoning.effort as reasoning_effort).
func fillNeMoGym(task *pipeline.Task, rcp any) error {
	m, ok := rcp.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: want an object, got %s", nemoGymKey, pipeline.JSONKind(rcp))
	}
	input, ok := m["input"]
	if !ok || input == nil {
		return fmt.Errorf("%s: missing \"input\" (the messages)", nemoGymKey)
	}
	msgs, err := pipeline.DecodeMessages(input, nemoGymKey+".input")
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		return fmt.Errorf("%s.input: no messages", nemoGymKey)
	}
	if ins, ok := m["instructions"]; ok && ins != nil {
		s, ok := ins.(string)
		if !ok {
			return fmt.Errorf("%s.instructions: want a string, got %s", nemoGymKey, pipeline.JSONKind(ins))
		}
		msgs = append([]pipeline.Message{{Role: pipeline.RoleSystem, Content: s}}, msgs...)
	}
	task.Messages = msgs
	params := map[string]any{}
	for k, v := range m {
		switch k {
		case "input", "instructions":
		case "tools":
			if v == nil {
				continue
			}
			list, ok := v.([]any)
			if !ok {
				return fmt.Errorf("%s.tools: want a list, got %s", nemoGymKey, pipeline.JSONKind(v))
			}
			tools, err := decodeTools(list, nemoGymKey+".tools")
			if err != nil {
				return err
			}
			task.Tools = tools
		case "max_output_tokens":
			if _, set := m["max_tokens"]; !set {
				params["max_tokens"] = v
			}
		case "reasoning":
			if r, ok := v.(map[string]any); ok {
				if e, ok := r["effort"]; ok && e != nil {
					params["reasoning_effort"] = e
				}
				continue
			}
			params[k] = v
		case "seed":
			// A seed that is not a 64-bit integer would be replaced by the
			// config's: the row is refused instead.
			if n, ok := v.(json.Number); ok {
				if _, err := n.Int64(); err != nil {
					return fmt.Errorf("%s.seed: %s is not a 64-bit integer", nemoGymKey, n)
				}
			}
			params[k] = v
		default:
			params[k] = v
		}
	}
	if len(params) > 0 {
		task.Params = params
	}
	return nil
}

// decodeTools reads tool definitions. A Responses API function tool
// ({type: function, name, parameters, ...}) becomes a chat completions tool
// ({type: function, function: {name, parameters, ...}}).
func decodeTools(list []any, where string) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(list))
	for i, t := range list {
		m, ok := t.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s[%d]: want a tool object, got %s", where, i, pipeline.JSONKind(t))
		}
		if _, nested := m["function"]; !nested && m["type"] == "function" {
			if _, named := m["name"]; named {
				fn := make(map[string]any, len(m))
				for k, v := range m {
					if k != "type" {
						fn[k] = v
					}
				}
				m = map[string]any{"type": "function", "function": fn}
			}
		}
		b, err := pipeline.MarshalJSON(m)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %v", where, i, err)
		}
		out = append(out, b)
	}
	return out, nil
}

func allObjects(list []any) bool {
	for _, v := range list {
		if _, ok := v.(map[string]any); !ok {
			return false
		}
	}
	return len(list) > 0
}
