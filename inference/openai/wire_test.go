package openai

import (
	"context"
	"encoding/json"
	"github.com/trajflow/trajflow/inference"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

func TestRequestBodyChat(t *testing.T) {
	s := newServer(t, nil)
	cfg := testConfig(s.URL) // no /v1: normalised
	cfg.Params = map[string]any{"temperature": 0.7, "logprobs": true, "return_token_ids": true,
		"extra_body": map[string]any{"top_k": 20}}
	c := newClient(t, cfg, HTTPOptions{APIKey: "sk-secret"})
	row := map[string]any{"temperature": 1.0, "max_tokens": 64, "seed": 7, "stream": true,
		"extra_body": map[string]any{"top_k": 5, "min_p": 0.1}}
	tool := json.RawMessage(`{"type":"function","function":{"name":"calc","parameters":{"type":"object"}}}`)
	req := &inference.Request{
		Messages: []pipeline.Message{
			{Role: "system", Content: "be brief"},
			{Role: "user", Content: "2+2?"},
			{Role: "assistant", ToolCalls: []pipeline.ToolCall{{ID: "call_1", Name: "calc", Arguments: `{"x":"2+2"}`}}, TokenIDs: []int32{1, 2}, Logprobs: []float32{-1, -2}, Turn: 1},
			{Role: "tool", Content: "4", ToolCallID: "call_1", Name: "calc", Turn: 1},
		},
		Params: inference.MergeParams(row, cfg.Params),
		Tools:  []json.RawMessage{tool},
	}
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if s.paths[0] != "/v1/chat/completions" {
		t.Errorf("path %q, want /v1/chat/completions", s.paths[0])
	}
	if got := s.headers[0].Get("Authorization"); got != "Bearer sk-secret" {
		t.Errorf("Authorization %q", got)
	}
	b := s.body(0)
	want := map[string]any{
		"model": "test-model", "temperature": 0.7, "max_tokens": 64.0, "seed": 7.0,
		"logprobs": true, "return_token_ids": true,
		"extra_body": map[string]any{"top_k": 20.0}, // the config's whole value (shallow merge)
	}
	for k, v := range want {
		if !reflect.DeepEqual(b[k], v) {
			t.Errorf("body[%s] = %#v, want %#v", k, b[k], v)
		}
	}
	if _, ok := b["stream"]; ok {
		t.Errorf("stream sent: %v", b["stream"])
	}
	tools, _ := b["tools"].([]any)
	if len(tools) != 1 || tools[0].(map[string]any)["function"].(map[string]any)["name"] != "calc" {
		t.Errorf("tools = %#v", b["tools"])
	}
	msgs, _ := b["messages"].([]any)
	if len(msgs) != 4 {
		t.Fatalf("messages = %#v", b["messages"])
	}
	asst := msgs[2].(map[string]any)
	if asst["content"] != nil {
		t.Errorf("assistant content with tool calls = %#v, want null", asst["content"])
	}
	for _, k := range []string{"token_ids", "logprobs", "turn"} {
		if _, ok := asst[k]; ok {
			t.Errorf("assistant message carries %s", k)
		}
	}
	tc := asst["tool_calls"].([]any)[0].(map[string]any)
	if tc["id"] != "call_1" || tc["type"] != "function" {
		t.Errorf("tool call = %#v", tc)
	}
	fn := tc["function"].(map[string]any)
	if fn["name"] != "calc" || fn["arguments"] != `{"x":"2+2"}` {
		t.Errorf("function = %#v (arguments must be a string)", fn)
	}
	toolMsg := msgs[3].(map[string]any)
	if toolMsg["role"] != "tool" || toolMsg["tool_call_id"] != "call_1" || toolMsg["name"] != "calc" || toolMsg["content"] != "4" {
		t.Errorf("tool message = %#v", toolMsg)
	}
	if sys := msgs[0].(map[string]any); sys["content"] != "be brief" || len(sys) != 2 {
		t.Errorf("system message = %#v", sys)
	}
}

func TestRequestBodyCompletions(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		io.WriteString(w, `{"choices":[{"text":" 4","finish_reason":"stop"}]}`)
	})
	cfg := testConfig(s.URL + "/v1/")
	cfg.API = "completions"
	c := newClient(t, cfg, HTTPOptions{})
	msgs := []pipeline.Message{{Role: "user", Content: "Q: 2+2?\n"}, {Role: "assistant", Content: "A:"}}
	resp, err := c.Complete(context.Background(), &inference.Request{Messages: msgs, Model: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != " 4" || resp.FinishReason != "stop" {
		t.Errorf("response %+v", resp)
	}
	if _, err := c.Complete(context.Background(), &inference.Request{Messages: msgs, Params: map[string]any{"prompt": []any{1.0, 2.0}}}); err != nil {
		t.Fatal(err)
	}
	if s.paths[0] != "/v1/completions" {
		t.Errorf("path %q", s.paths[0])
	}
	if b := s.body(0); b["prompt"] != "Q: 2+2?\nA:" || b["model"] != "other" || b["messages"] != nil {
		t.Errorf("body = %#v", b)
	}
	if b := s.body(1); !reflect.DeepEqual(b["prompt"], []any{1.0, 2.0}) {
		t.Errorf("params.prompt not used: %#v", b["prompt"])
	}
}

func TestDecodeResponse(t *testing.T) {
	tests := []struct {
		name string
		body string
		want inference.Response
		err  string
	}{
		{
			name: "vllm extras",
			body: `{"id":"x","object":"chat.completion","prompt_token_ids":[1,2,3],
				"choices":[{"index":0,"message":{"role":"assistant","content":"ok","reasoning_content":null},
				"finish_reason":"length","token_ids":[10,11],
				"logprobs":{"content":[{"token":"o","logprob":-0.5,"bytes":[111],"top_logprobs":[]},{"token":"k","logprob":-1.25,"bytes":[107],"top_logprobs":[{"token":"x","logprob":-3}]}]}}],
				"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},
				"sim_trailer":{"turns_left":1,"correct":true}}`,
			want: inference.Response{
				Message:        pipeline.Message{Role: "assistant", Content: "ok", TokenIDs: []int32{10, 11}, Logprobs: []float32{-0.5, -1.25}},
				PromptTokenIDs: []int32{1, 2, 3}, FinishReason: "length", PromptTokens: 3, CompletionTokens: 2,
				Extra: json.RawMessage(`{"turns_left":1,"correct":true}`),
			},
		},
		{
			name: "server without extras",
			body: `{"choices":[{"message":{"role":"assistant","content":"plain"},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":4,"completion_tokens":1}}`,
			want: inference.Response{Message: pipeline.Message{Role: "assistant", Content: "plain"}, FinishReason: "stop", PromptTokens: 4, CompletionTokens: 1},
		},
		{
			name: "tool calls, string and object arguments, null content",
			body: `{"choices":[{"message":{"content":null,"tool_calls":[
				{"id":"a","type":"function","function":{"name":"f","arguments":"{\"q\":1}"}},
				{"id":"b","function":{"name":"g","arguments":{"r":2}}}]},"finish_reason":"tool_calls"}]}`,
			want: inference.Response{Message: pipeline.Message{Role: "assistant", ToolCalls: []pipeline.ToolCall{
				{ID: "a", Type: "function", Name: "f", Arguments: `{"q":1}`},
				{ID: "b", Type: "function", Name: "g", Arguments: `{"r":2}`}}}, FinishReason: "tool_calls"},
		},
		{
			name: "completions with token_logprobs and per-choice prompt ids",
			body: `{"choices":[{"text":"abc","finish_reason":"stop","token_ids":[5],"prompt_token_ids":[9,8],"logprobs":{"tokens":["abc"],"token_logprobs":[-0.25]}}],"sim_trailer":null}`,
			want: inference.Response{Message: pipeline.Message{Role: "assistant", Content: "abc", TokenIDs: []int32{5}, Logprobs: []float32{-0.25}}, PromptTokenIDs: []int32{9, 8}, FinishReason: "stop"},
		},
		{name: "no choices", body: `{"choices":[]}`, err: "no choices"},
		{name: "error object", body: `{"error":{"message":"overloaded","type":"InternalServerError"}}`, err: "no choices in the response; the server's error: overloaded"},
		{name: "error string", body: `{"error":"engine dead"}`, err: "the server's error: engine dead"},
		{name: "negative completion tokens", body: `{"choices":[{"text":"a"}],"usage":{"prompt_tokens":3,"completion_tokens":-5}}`, err: "usage.completion_tokens: -5 is out of range"},
		{name: "negative prompt tokens", body: `{"choices":[{"text":"a"}],"usage":{"prompt_tokens":-1,"completion_tokens":1}}`, err: "usage.prompt_tokens: -1 is out of range"},
		{name: "huge completion tokens", body: `{"choices":[{"text":"a"}],"usage":{"prompt_tokens":1,"completion_tokens":9000000000}}`, err: "usage.completion_tokens: 9000000000 is out of range"},
		{name: "negative token id", body: `{"choices":[{"text":"a","token_ids":[3,-2]}]}`, err: "choices[0].token_ids[1]: -2 is negative"},
		{name: "positive logprob", body: `{"choices":[{"text":"a","token_ids":[3],"logprobs":{"token_logprobs":[2.5]}}]}`, err: "choices[0].logprobs[0]: 2.5 is not a log-probability"},
		{name: "logprob over float32", body: `{"choices":[{"message":{"content":"a"},"logprobs":{"content":[{"logprob":-1e308}]}}]}`, err: "logprob"},
		{name: "not json", body: `<html>bad gateway</html>`, err: "invalid character"},
		{name: "truncated", body: `{"choices":[{"message":{"content":"x"`, err: "unexpected end"},
		{name: "empty choice", body: `{"choices":[{}]}`, err: "neither message nor text"},
		{name: "token id overflow", body: `{"choices":[{"text":"","token_ids":[99999999999]}]}`, err: "int32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeResponse([]byte(tt.body))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", *got, tt.want)
			}
		})
	}
}

func TestServerMessage(t *testing.T) {
	tests := []struct{ body, want string }{
		{`{"error":{"message":"bad key","type":"auth"}}`, "bad key"},
		{`{"object":"error","message":"This model's maximum context length is 10","code":400}`, "This model's maximum context length is 10"},
		{`{"error":"plain"}`, "plain"},
		{`{"detail":"Not Found"}`, `"Not Found"`},
		{"  oops\n", "oops"},
	}
	for _, tt := range tests {
		if got := serverMessage([]byte(tt.body)); got != tt.want {
			t.Errorf("serverMessage(%s) = %q, want %q", tt.body, got, tt.want)
		}
	}
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(okBody))
	f.Add([]byte(`{"prompt_token_ids":[1],"choices":[{"message":{"content":"a","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]},"token_ids":[2],"logprobs":{"content":[{"logprob":-1}]}}],"sim_trailer":{}}`))
	f.Add([]byte(`{"choices":[{"text":"x","logprobs":{"token_logprobs":[null,-1]}}]}`))
	f.Add([]byte(`{"error":{"message":"x"}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := decodeResponse(data)
		if err != nil {
			if resp != nil {
				t.Fatal("response with an error")
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		if resp.Message.Role != pipeline.RoleAssistant {
			t.Fatalf("role %q", resp.Message.Role)
		}
		if resp.Extra != nil && !json.Valid(resp.Extra) {
			t.Fatalf("invalid trailer %q", resp.Extra)
		}
	})
}
