package gateway

import (
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/trajflow/trajflow/pipeline"
)

type msg = pipeline.Message
type tcall = pipeline.ToolCall

// jsonEqual says whether a and b are the same JSON value.
func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	norm := func(v any) any {
		var raw []byte
		switch x := v.(type) {
		case string:
			raw = []byte(x)
		case []byte:
			raw = x
		case json.RawMessage:
			raw = x
		default:
			raw = mustJSON(x)
		}
		var out any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("not JSON: %s", raw)
		}
		return out
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

const calcChatTool = `{"type":"function","function":{"name":"calculator","description":"calc","parameters":{"type":"object","properties":{"expression":{"type":"string"}}}}}`

func TestParseRequests(t *testing.T) {
	cases := []struct {
		name   string
		parse  func([]byte) (*Call, *echo, *reqError)
		body   string
		msgs   []msg
		tools  []string
		params string
		stream bool
	}{
		{
			name:  "chat: roles, parts, tool round trip",
			parse: parseChat,
			body: `{"model":"m","stream":true,"stream_options":{"include_usage":true},"temperature":0.5,"max_completion_tokens":64,"stop":"END","n":1,
				"tools":[` + calcChatTool + `],"tool_choice":"auto","user":"u","store":false,"metadata":{"a":"b"},"parallel_tool_calls":false,
				"response_format":{"type":"json_object"},
				"messages":[
				{"role":"developer","content":"be brief"},
				{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
				{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+1\"}"}}]},
				{"role":"tool","tool_call_id":"c1","content":"2"},
				{"role":"assistant","content":"It is 2."}]}`,
			msgs: []msg{
				{Role: "system", Content: "be brief"},
				{Role: "user", Content: "a\nb"},
				{Role: "assistant", ToolCalls: []tcall{{ID: "c1", Type: "function", Name: "calculator", Arguments: `{"expression":"1+1"}`}}},
				{Role: "tool", Content: "2", ToolCallID: "c1"},
				{Role: "assistant", Content: "It is 2."},
			},
			tools:  []string{calcChatTool},
			params: `{"temperature":0.5,"max_tokens":64,"stop":["END"],"tool_choice":"auto","parallel_tool_calls":false,"response_format":{"type":"json_object"}}`,
			stream: true,
		},
		{
			name:   "responses: string input, instructions",
			parse:  parseResponses,
			body:   `{"model":"m","input":"hi","instructions":"sys","max_output_tokens":10,"reasoning":{"effort":"none"},"truncation":"disabled","include":[],"store":false,"service_tier":"auto"}`,
			msgs:   []msg{{Role: "system", Content: "sys"}, {Role: "user", Content: "hi"}},
			params: `{"max_tokens":10}`,
		},
		{
			name:  "responses: items, function call round trip, tools",
			parse: parseResponses,
			body: `{"model":"m","stream":true,"tool_choice":{"type":"function","name":"calculator"},
				"tools":[{"type":"function","name":"calculator","description":"calc","parameters":{"type":"object","properties":{"expression":{"type":"string"}}},"strict":true}],
				"text":{"format":{"type":"json_schema","name":"out","schema":{"type":"object"}}},
				"input":[
				{"role":"developer","content":"be brief"},
				{"type":"message","role":"user","content":[{"type":"input_text","text":"q"}]},
				{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Let me compute.","annotations":[]}]},
				{"type":"function_call","id":"fc_1","call_id":"c1","name":"calculator","arguments":"{}","status":"completed"},
				{"type":"reasoning","id":"rs_1","summary":[]},
				{"type":"function_call_output","call_id":"c1","output":"2"}]}`,
			msgs: []msg{
				{Role: "system", Content: "be brief"},
				{Role: "user", Content: "q"},
				{Role: "assistant", Content: "Let me compute.", ToolCalls: []tcall{{ID: "c1", Type: "function", Name: "calculator", Arguments: "{}"}}},
				{Role: "tool", Content: "2", ToolCallID: "c1"},
			},
			tools:  []string{`{"type":"function","function":{"name":"calculator","description":"calc","parameters":{"type":"object","properties":{"expression":{"type":"string"}}},"strict":true}}`},
			params: `{"tool_choice":{"type":"function","function":{"name":"calculator"}},"response_format":{"type":"json_schema","json_schema":{"name":"out","schema":{"type":"object"}}}}`,
			stream: true,
		},
		{
			name:  "messages: system blocks, tool_use and tool_result round trip",
			parse: parseMessages,
			body: `{"model":"m","max_tokens":100,"stop_sequences":["X"],"top_k":5,"metadata":{"user_id":"u"},
				"system":[{"type":"text","text":"s1"},{"type":"text","text":"s2"}],
				"tools":[{"name":"calculator","description":"calc","input_schema":{"type":"object","properties":{"expression":{"type":"string"}}}}],
				"tool_choice":{"type":"any","disable_parallel_tool_use":true},
				"messages":[
				{"role":"user","content":"q"},
				{"role":"assistant","content":[{"type":"text","text":"calling"},{"type":"tool_use","id":"t1","name":"calculator","input":{"expression": "1+1"}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"2"}]},{"type":"text","text":"go on"}]}]}`,
			msgs: []msg{
				{Role: "system", Content: "s1\ns2"},
				{Role: "user", Content: "q"},
				{Role: "assistant", Content: "calling", ToolCalls: []tcall{{ID: "t1", Type: "function", Name: "calculator", Arguments: `{"expression":"1+1"}`}}},
				{Role: "tool", Content: "2", ToolCallID: "t1"},
				{Role: "user", Content: "go on"},
			},
			tools:  []string{calcChatTool},
			params: `{"max_tokens":100,"stop":["X"],"top_k":5,"tool_choice":"required","parallel_tool_calls":false}`,
		},
		{
			name:   "messages: tool_choice tool, string tool_result",
			parse:  parseMessages,
			body:   `{"model":"m","max_tokens":1,"stream":true,"tool_choice":{"type":"tool","name":"calculator"},"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"calculator","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}]}`,
			msgs:   []msg{{Role: "assistant", ToolCalls: []tcall{{ID: "t1", Type: "function", Name: "calculator", Arguments: "{}"}}}, {Role: "tool", Content: "ok", ToolCallID: "t1"}},
			params: `{"max_tokens":1,"tool_choice":{"type":"function","function":{"name":"calculator"}}}`,
			stream: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _, e := tc.parse([]byte(tc.body))
			if e != nil {
				t.Fatalf("refused: %v", e)
			}
			if !reflect.DeepEqual(c.Messages, tc.msgs) {
				t.Errorf("messages:\n got %+v\nwant %+v", c.Messages, tc.msgs)
			}
			if len(c.Tools) != len(tc.tools) {
				t.Fatalf("tools: got %d, want %d", len(c.Tools), len(tc.tools))
			}
			for i := range c.Tools {
				if !jsonEqual(t, c.Tools[i], tc.tools[i]) {
					t.Errorf("tools[%d]: got %s want %s", i, c.Tools[i], tc.tools[i])
				}
			}
			if !jsonEqual(t, c.Params, tc.params) {
				t.Errorf("params: got %s want %s", mustJSON(c.Params), tc.params)
			}
			if c.Stream != tc.stream {
				t.Errorf("stream = %v", c.Stream)
			}
		})
	}
}

func TestRenderAnswers(t *testing.T) {
	id := &ids{Resp: "R", Msg: "M", Created: 7}
	text := &Answer{Message: msg{Role: "assistant", Content: "hello"}, FinishReason: "stop", PromptTokens: 3, CompletionTokens: 2}
	tool := normalize(&Answer{Message: msg{Role: "assistant", ToolCalls: []tcall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"1+1"}`}}}, PromptTokens: 3, CompletionTokens: 2})
	long := &Answer{Message: msg{Role: "assistant", Content: "cut"}, FinishReason: "length"}
	stopSeq := &Answer{Message: msg{Role: "assistant", Content: "x"}, FinishReason: "stop", StopSequence: "END"}
	req := &echo{Model: "m", Raw: obj{}}
	cases := []struct {
		name  string
		codec apiCodec
		a     *Answer
		want  string // the fields checked (a subset of the response)
	}{
		{"chat text", chatCodec{}, text, `{"id":"chatcmpl-R","object":"chat.completion","created":7,"model":"m","system_fingerprint":null,
			"choices":[{"index":0,"message":{"role":"assistant","content":"hello","refusal":null},"finish_reason":"stop","logprobs":null}],
			"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`},
		{"chat tool call", chatCodec{}, tool, `{"id":"chatcmpl-R","object":"chat.completion","created":7,"model":"m","system_fingerprint":null,
			"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+1\"}"}}]},"finish_reason":"tool_calls","logprobs":null}],
			"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`},
		{"messages text", messagesCodec{}, text, `{"id":"msg_R","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hello"}],
			"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":2,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
		{"messages tool_use", messagesCodec{}, tool, `{"id":"msg_R","type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"c1","name":"calculator","input":{"expression":"1+1"}}],
			"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":2,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
		{"messages max_tokens", messagesCodec{}, long, `{"id":"msg_R","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"cut"}],
			"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
		{"messages stop_sequence", messagesCodec{}, stopSeq, `{"id":"msg_R","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"x"}],
			"stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.codec.render(req, tc.a, id)
			if !jsonEqual(t, got, tc.want) {
				t.Errorf("got  %s\nwant %s", mustJSON(got), tc.want)
			}
		})
	}

	// Responses: the output items, status and usage.
	for _, tc := range []struct {
		name   string
		a      *Answer
		output string
		status string
	}{
		{"text", text, `[{"type":"message","id":"msg_M","status":"completed","role":"assistant","content":[{"type":"output_text","text":"hello","annotations":[],"logprobs":[]}]}]`, "completed"},
		{"function call", tool, `[{"type":"function_call","id":"fc_M_0","call_id":"c1","name":"calculator","arguments":"{\"expression\":\"1+1\"}","status":"completed"}]`, "completed"},
		{"length", long, `[{"type":"message","id":"msg_M","status":"completed","role":"assistant","content":[{"type":"output_text","text":"cut","annotations":[],"logprobs":[]}]}]`, "incomplete"},
	} {
		t.Run("responses "+tc.name, func(t *testing.T) {
			r := responsesCodec{}.render(req, tc.a, id).(map[string]any)
			if !jsonEqual(t, r["output"], tc.output) || r["status"] != tc.status || r["object"] != "response" || r["id"] != "resp_R" {
				t.Errorf("got %s", mustJSON(r))
			}
			if !jsonEqual(t, r["usage"], map[string]any{"input_tokens": tc.a.PromptTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
				"output_tokens": tc.a.CompletionTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": tc.a.PromptTokens + tc.a.CompletionTokens}) {
				t.Errorf("usage %s", mustJSON(r["usage"]))
			}
		})
	}
}

func TestMessagesArgumentsNotObject(t *testing.T) {
	for _, args := range []string{`[1]`, `"s"`, `{bad`, `null`} {
		a := normalize(&Answer{Message: msg{ToolCalls: []tcall{{Name: "f", Arguments: args}}}})
		if e := (messagesCodec{}).check(a); e == nil || e.Status != 502 {
			t.Errorf("arguments %s: check = %v; want a 502", args, e)
		}
	}
	if e := (messagesCodec{}).check(normalize(&Answer{Message: msg{ToolCalls: []tcall{{Name: "f"}}}})); e != nil {
		t.Errorf("empty arguments: %v; want {}", e)
	}
}

func TestSplit(t *testing.T) {
	for _, s := range []string{"", "short", "a string longer than sixteen bytes, with é and 日本語 in it"} {
		parts := split(s)
		joined := ""
		for _, p := range parts {
			if !utf8.ValidString(p) || len(p) > deltaSize+3 {
				t.Errorf("bad part %q", p)
			}
			joined += p
		}
		if joined != s || (s == "" && len(parts) != 0) {
			t.Errorf("split(%q) = %q", s, parts)
		}
	}
}
