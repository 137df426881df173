package inference

import (
	"encoding/json"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

const (
	toolCallOpen  = "<tool_call>"
	toolCallClose = "</tool_call>"
)

// ParseToolCalls reads tool calls from generated text in the Hermes / Qwen
// format, as vLLM's hermes tool parser does: each call is a JSON object
// {"name": …, "arguments": {…}} between <tool_call> and </tool_call> (the
// last one may lack its closing tag when generation stopped there). The
// content is the text before the first <tool_call>, untouched.
//
// When the text holds no <tool_call>, or any call is not such an object,
// there are no calls and the content is the whole text (vLLM's parser also
// gives up on the whole message). Arguments are stored as vLLM's parser
// stores them (see parseHermesCall). Calls get no ID; the caller names
// them.
func ParseToolCalls(text string) (content string, calls []pipeline.ToolCall) {
	first := strings.Index(text, toolCallOpen)
	if first < 0 {
		return text, nil
	}
	rest := text[first:]
	for len(rest) > 0 {
		i := strings.Index(rest, toolCallOpen)
		if i < 0 {
			break
		}
		body := rest[i+len(toolCallOpen):]
		j := strings.Index(body, toolCallClose)
		if j < 0 {
			rest = ""
		} else {
			rest = body[j+len(toolCallClose):]
			body = body[:j]
		}
		call, ok := parseHermesCall(body)
		if !ok {
			return text, nil
		}
		calls = append(calls, call)
	}
	return text[:first], calls
}

// parseHermesCall reads {"name": "...", "arguments": ...} as vLLM's
// hermes parser does: the arguments are stored as
// json.dumps(arguments, ensure_ascii=False) writes them (PythonJSON), so
// that tokens mode stores the same text chat mode gets from vLLM:
// {"expression": "85 + 15"}, a string value as a JSON string literal, null
// as "null". A call without "arguments", or whose name is not a non-empty
// string, is not a call (vLLM's parser then fails on the whole message).
func parseHermesCall(body string) (pipeline.ToolCall, bool) {
	var w struct {
		Name      *string         `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	dec := json.NewDecoder(strings.NewReader(body))
	if err := dec.Decode(&w); err != nil || w.Name == nil || *w.Name == "" || w.Arguments == nil {
		return pipeline.ToolCall{}, false
	}
	if strings.TrimSpace(body[dec.InputOffset():]) != "" { // more than one JSON value
		return pipeline.ToolCall{}, false
	}
	args, err := PythonJSON(w.Arguments)
	if err != nil {
		return pipeline.ToolCall{}, false
	}
	return pipeline.ToolCall{Type: "function", Name: *w.Name, Arguments: args}, true
}
