package sources

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/trajflow/trajflow/pipeline"
)

// FormatOpenAIBatch is OpenAI's Batch input file (also vLLM's run-batch
// input): one request per line, {"custom_id", "method", "url", "body"}.
const FormatOpenAIBatch = "openai_batch"

// The URLs of an OpenAI Batch line trajflow sends, and the API of each.
const (
	BatchURLChat        = "/v1/chat/completions"
	BatchURLCompletions = "/v1/completions"
)

// batchIDs remembers the custom_id of every line read, so that a second
// line with one is an error naming both lines.
type batchIDs map[string]int64

// see records the custom_id of the line numbered n at where; a line that
// is not JSON or has no string custom_id is left to the row parser.
func (ids batchIDs) see(path string, n int64, line []byte) error {
	var head struct {
		CustomID *string `json:"custom_id"`
	}
	if json.Unmarshal(line, &head) != nil || head.CustomID == nil || *head.CustomID == "" {
		return nil
	}
	if first, dup := ids[*head.CustomID]; dup {
		return fmt.Errorf("source: %s:%d: custom_id %q is already on line %d (the custom_id of an OpenAI Batch file names one request)", path, n, *head.CustomID, first)
	}
	ids[*head.CustomID] = n
	return nil
}

// parseBatchLine turns one OpenAI Batch input line into a task: its
// custom_id the task's CustomID, its url the task's API, its body's
// messages (chat) or prompt (completions) the prompt, its body's other
// keys the task's params (the body's model is not sent: generate.model
// is). A line that is not a JSON object with a custom_id is a bad row
// (source.on_bad_row); a line whose request cannot be sent (another url
// or method, stream: true, a body without messages or prompt) is a task
// with Invalid set: its rollouts are error rows, and the run goes on.
func parseBatchLine(where string, index int64, row []byte) (*pipeline.Task, error) {
	dec := json.NewDecoder(bytes.NewReader(row))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &RowError{Where: where, Reason: "invalid JSON: " + jsonErr(err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &RowError{Where: where, Reason: "invalid JSON: more than one value on the line"}
	}
	fields, ok := v.(map[string]any)
	if !ok {
		return nil, &RowError{Where: where, Reason: fmt.Sprintf("row is %s, want an OpenAI Batch request object {custom_id, method, url, body}", pipeline.JSONKind(v))}
	}
	id, ok := fields["custom_id"].(string)
	if !ok || id == "" {
		return nil, &RowError{Where: where, Reason: "custom_id: want a non-empty string (every OpenAI Batch line names its request)"}
	}
	raw, err := compactRow(row)
	if err != nil {
		return nil, &RowError{Where: where, Reason: "invalid JSON: " + jsonErr(err)}
	}
	task := &pipeline.Task{Index: index, Source: where, Raw: raw, Fields: fields, CustomID: id}
	if why := fillBatchTask(task, fields); why != "" {
		task.Invalid = "custom_id " + strconv.Quote(id) + ": " + why
		task.Messages, task.Params, task.Tools = nil, nil, nil
	}
	return task, nil
}

// fillBatchTask sets the task's API, prompt, params and tools from the
// line, or says why its request cannot be sent.
func fillBatchTask(task *pipeline.Task, fields map[string]any) string {
	if m, ok := fields["method"]; ok && m != "POST" {
		return fmt.Sprintf("method %v: only POST is sent", m)
	}
	chat := false
	switch u := fields["url"]; u {
	case BatchURLChat:
		task.API, chat = "chat", true
	case BatchURLCompletions:
		task.API = "completions"
	default:
		return fmt.Sprintf("url %v: want %s or %s", jsonText(u), BatchURLChat, BatchURLCompletions)
	}
	body, ok := fields["body"].(map[string]any)
	if !ok {
		return fmt.Sprintf("body: want an object, got %s", pipeline.JSONKind(fields["body"]))
	}
	if s, ok := body["stream"].(bool); ok && s {
		return "body.stream: true is not supported (the output holds whole responses)"
	}
	params := map[string]any{}
	for k, v := range body {
		switch k {
		case "model", "stream", "stream_options", "messages", "tools":
		case "prompt":
			if !chat {
				params[k] = v
			}
		default:
			params[k] = v
		}
	}
	if chat {
		msgs, err := pipeline.DecodeMessages(body["messages"], "body.messages")
		if err != nil {
			return err.Error()
		}
		if len(msgs) == 0 {
			return "body.messages: no messages"
		}
		task.Messages = msgs
		if t, ok := body["tools"]; ok && t != nil {
			list, ok := t.([]any)
			if !ok {
				return fmt.Sprintf("body.tools: want a list, got %s", pipeline.JSONKind(t))
			}
			tools, err := decodeTools(list, "body.tools")
			if err != nil {
				return err.Error()
			}
			task.Tools = tools
		}
	} else {
		p, ok := body["prompt"].(string)
		if !ok {
			return fmt.Sprintf("body.prompt: want a string, got %s", pipeline.JSONKind(body["prompt"]))
		}
		task.Messages = []pipeline.Message{{Role: pipeline.RoleUser, Content: p}}
	}
	if len(params) > 0 {
		task.Params = params
	}
	return ""
}

// jsonText shows a JSON value in an error.
func jsonText(v any) string {
	if v == nil {
		return "(missing)"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
