package inference_test

import (
	"strings"
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

func TestParseToolCalls(t *testing.T) {
	call := func(name, args string) pipeline.ToolCall {
		return pipeline.ToolCall{Type: "function", Name: name, Arguments: args}
	}
	tests := []struct {
		name    string
		text    string
		content string
		calls   []pipeline.ToolCall
	}{
		{"plain text", "The answer is 4.", "The answer is 4.", nil},
		{"one call", "Let me compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2+2\"}}\n</tool_call>", "Let me compute.\n", []pipeline.ToolCall{call("calculator", `{"expression": "2+2"}`)}},
		{"two calls", `<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {"x": 1}}</tool_call>`, "", []pipeline.ToolCall{call("a", "{}"), call("b", `{"x": 1}`)}},
		{"unclosed last call", `ok <tool_call>{"name": "a", "arguments": {"x": [1, 2]}}`, "ok ", []pipeline.ToolCall{call("a", `{"x": [1, 2]}`)}},
		// vLLM's hermes parser: json.dumps of the value, whatever it is.
		{"arguments as a string", `<tool_call>{"name": "a", "arguments": "{\"x\": 1}"}</tool_call>`, "", []pipeline.ToolCall{call("a", `"{\"x\": 1}"`)}},
		{"null arguments", `<tool_call>{"name": "a", "arguments": null}</tool_call>`, "", []pipeline.ToolCall{call("a", "null")}},
		{"compact, non-ASCII, floats", `<tool_call>{"name":"a","arguments":{"city":"Zürich","t":1.50,"n":1e2,"s":"<&>"}}</tool_call>`, "", []pipeline.ToolCall{call("a", `{"city": "Zürich", "t": 1.5, "n": 100.0, "s": "<&>"}`)}},
		{"no arguments: whole text is content", `<tool_call>{"name": "a"}</tool_call>`, `<tool_call>{"name": "a"}</tool_call>`, nil},
		{"bad JSON: whole text is content", `x <tool_call>{"name": </tool_call>`, `x <tool_call>{"name": </tool_call>`, nil},
		{"no name", `<tool_call>{"arguments": {}}</tool_call>`, `<tool_call>{"arguments": {}}</tool_call>`, nil},
		{"trailing garbage", `<tool_call>{"name": "a"} x</tool_call>`, `<tool_call>{"name": "a"} x</tool_call>`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			content, calls := inference.ParseToolCalls(tt.text)
			if content != tt.content {
				t.Errorf("content %q, want %q", content, tt.content)
			}
			if len(calls) != len(tt.calls) {
				t.Fatalf("calls %+v, want %+v", calls, tt.calls)
			}
			for i := range calls {
				if calls[i] != tt.calls[i] {
					t.Errorf("call %d: %+v, want %+v", i, calls[i], tt.calls[i])
				}
			}
		})
	}
}

// FuzzParseToolCalls checks that parsing never panics, that the content
// is a prefix of the text, that calls come only with a <tool_call> tag,
// and that every call has a name and arguments that are valid JSON text
// whenever the model wrote them as an object.
func FuzzParseToolCalls(f *testing.F) {
	for _, s := range []string{
		"plain", `<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>`,
		`pre<tool_call>{"name": "a"}`, `<tool_call></tool_call>`, `<tool_call>{"name": "a", "arguments": "raw"}</tool_call>`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		content, calls := inference.ParseToolCalls(text)
		if !strings.HasPrefix(text, content) {
			t.Fatalf("content %q is not a prefix of %q", content, text)
		}
		if len(calls) > 0 && !strings.Contains(text, "<tool_call>") {
			t.Fatalf("calls without a tag in %q", text)
		}
		if len(calls) == 0 && content != text {
			t.Fatalf("no calls but content %q cut from %q", content, text)
		}
		for _, c := range calls {
			if c.Name == "" || c.Type != "function" {
				t.Fatalf("call %+v", c)
			}
			if c.Arguments == "" {
				t.Fatalf("call %+v has no arguments text", c)
			}
		}
	})
}
