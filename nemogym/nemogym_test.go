package nemogym_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/nemogym"
	"github.com/trajflow/trajflow/pipeline"
)

func TestSplitThink(t *testing.T) {
	for _, c := range []struct {
		in        string
		reasoning []string
		rest      string
	}{
		{"42", nil, "42"},
		{"<think>a</think>42", []string{"a"}, "42"},
		{"<think>a\nb</think>\n42<think>c</think>!", []string{"a\nb", "c"}, "\n42!"},
		{"<think>cut off", nil, "<think>cut off"},
		{"<think></think>", []string{""}, ""},
	} {
		r, rest := nemogym.SplitThink(c.in)
		if !reflect.DeepEqual(r, c.reasoning) || rest != c.rest {
			t.Errorf("SplitThink(%q) = %q, %q; want %q, %q", c.in, r, rest, c.reasoning, c.rest)
		}
	}
}

func FuzzSplitThink(f *testing.F) {
	for _, s := range []string{"", "x", "<think>a</think>b", "<think><think>a</think></think>", "</think><think>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, rest := nemogym.SplitThink(s)
		n := len(rest)
		for _, x := range r {
			n += len(x) + len("<think></think>")
		}
		if n != len(s) {
			t.Fatalf("SplitThink(%q) = %q, %q: lengths do not add up", s, r, rest)
		}
		if !strings.Contains(s, "<think>") && (r != nil || rest != s) {
			t.Fatalf("SplitThink(%q) changed a reply without <think>", s)
		}
	})
}

func TestCheckTools(t *testing.T) {
	for _, c := range []struct {
		tools string
		want  string
	}{
		{`null`, ""},
		{`[]`, ""},
		{`[{"type":"function","name":"f","parameters":null,"strict":null}]`, ""},
		{`[{"type":"web_search"}]`, ""},
		{`[{"type":"function","name":"f","parameters":{}}]`, `needs "strict"`},
		{`[{"type":"function","function":{"name":"f"}}]`, `needs "name"`},
		{`{}`, "want a list"},
		{`[1]`, "want an object"},
	} {
		var v any
		json.Unmarshal([]byte(c.tools), &v)
		err := nemogym.CheckTools(map[string]any{"tools": v})
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("tools %s: err = %v, want %q", c.tools, err, c.want)
		}
	}
}

func TestRequestKeepsTheRowsParams(t *testing.T) {
	raw := `{"responses_create_params":{"input":"Say hi","instructions":"Be terse.","temperature":0.25},"expected_answer":"hi","agent_ref":{"name":"a"}}`
	r := &pipeline.Rollout{NoSeed: true,
		Task:         &pipeline.Task{Index: 4, Raw: json.RawMessage(raw)},
		RolloutIndex: 2,
		Messages:     []pipeline.Message{{Role: "system", Content: "Be terse."}, {Role: "user", Content: "Say hi"}},
	}
	req, err := nemogym.Request(r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(req)
	want := `{"_ng_rollout_index":2,"_ng_task_index":4,"agent_ref":{"name":"a"},"expected_answer":"hi","responses_create_params":{"input":"Say hi","instructions":"Be terse.","temperature":0.25}}`
	if string(b) != want {
		t.Fatalf("request = %s\nwant      %s", b, want)
	}
}

func TestCreateParamsFromTheRenderedPrompt(t *testing.T) {
	r := &pipeline.Rollout{NoSeed: true,
		Task: &pipeline.Task{
			Raw:    json.RawMessage(`{"question":"1+1"}`),
			Params: map[string]any{"temperature": 0.5},
			Tools:  []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"calc","parameters":{}}}`)},
		},
		Messages: []pipeline.Message{{Role: "user", Content: "Solve 1+1"}, {Role: "assistant", Content: "2", Turn: 1}},
	}
	req, _ := nemogym.Request(r)
	b, _ := json.Marshal(req[nemogym.ParamsKey])
	want := `{"input":[{"content":"Solve 1+1","role":"user","type":"message"}],"temperature":0.5,"tools":[{"name":"calc","parameters":{},"type":"function"}]}`
	if string(b) != want {
		t.Fatalf("params = %s\nwant     %s", b, want)
	}
}

func TestResponse(t *testing.T) {
	r := &pipeline.Rollout{NoSeed: true,
		TrajID: "t1", Model: "m", FinishReason: "length", PromptTokens: 30, CompletionTokens: 12,
		Messages: []pipeline.Message{
			{Role: "user", Content: "q"},
			{Role: "assistant", Turn: 1, ToolCalls: []pipeline.ToolCall{{ID: "c1", Type: "function", Name: "f", Arguments: "{}"}}},
			{Role: "tool", Turn: 1, ToolCallID: "c1", Content: "out"},
			{Role: "assistant", Turn: 2, Content: "<think>hmm</think>The answer is"},
		},
	}
	resp := nemogym.Response(r, nil, map[string]any{"temperature": 1.0, "instructions": "x"}, time.Unix(100, 0))
	b, _ := json.Marshal(resp)
	want := `{"created_at":100,"id":"resp_t1","incomplete_details":{"reason":"max_output_tokens"},"instructions":"x","model":"m","object":"response",` +
		`"output":[{"arguments":"{}","call_id":"c1","id":"c1","name":"f","status":"completed","type":"function_call"},` +
		`{"call_id":"c1","output":"out","status":"completed","type":"function_call_output"},` +
		`{"id":"rs_3","summary":[{"text":"hmm","type":"summary_text"}],"type":"reasoning"},` +
		`{"content":[{"annotations":[],"text":"The answer is","type":"output_text"}],"id":"msg_3","role":"assistant","status":"completed","type":"message"}],` +
		`"parallel_tool_calls":true,"status":"incomplete","temperature":1,"tool_choice":"auto","tools":[],` +
		`"usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":null},"output_tokens":12,"output_tokens_details":{"reasoning_tokens":null},"total_tokens":42}}`
	if string(b) != want {
		t.Fatalf("response = %s\nwant       %s", b, want)
	}
	r.FinishReason = "stop"
	if resp := nemogym.Response(r, nil, nil, time.Unix(100, 0)); resp["status"] != "completed" || resp["incomplete_details"] != nil {
		t.Fatalf("a complete reply: %v %v", resp["status"], resp["incomplete_details"])
	}
}

// A prompt or observation with images becomes Responses API input parts.
func TestImagePartsAsInputImage(t *testing.T) {
	parts := []pipeline.ContentPart{{Type: "text", Text: "see"}, {Type: "image_url", ImageURL: "sha256:ab"}}
	r := &pipeline.Rollout{NoSeed: true,
		Task:     &pipeline.Task{Raw: json.RawMessage(`{}`)},
		Messages: []pipeline.Message{{Role: "user", Content: "see", Parts: parts}, {Role: "assistant", Content: "ok", Turn: 1}, {Role: "user", Content: "see", Parts: parts, Turn: 1}},
	}
	req, _ := nemogym.Request(r)
	b, _ := json.Marshal(req[nemogym.ParamsKey])
	want := `{"input":[{"content":[{"text":"see","type":"input_text"},{"detail":"auto","image_url":"sha256:ab","type":"input_image"}],"role":"user","type":"message"}]}`
	if string(b) != want {
		t.Fatalf("params = %s\nwant     %s", b, want)
	}
	out, _ := json.Marshal(nemogym.Output(r.Messages[1:]))
	if !strings.Contains(string(out), `{"content":[{"text":"see","type":"input_text"},{"detail":"auto","image_url":"sha256:ab","type":"input_image"}],"role":"user","type":"message"}`) {
		t.Fatalf("output = %s", out)
	}
}

// TestOverridden: Gym merges its responses_create_params overrides over
// every row (row | overrides) and, with num_repeats_add_seed, sets the
// seed in metadata.extra_body (a JSON string, merged into the one there);
// the overrides are written in the Responses API's names.
func TestOverridden(t *testing.T) {
	seed := int64(3)
	tests := []struct {
		name        string
		rcp, params map[string]any
		seed        *int64
		want        string
	}{
		{"none", map[string]any{"input": "hi", "temperature": 0.5}, nil, nil, `{"input":"hi","temperature":0.5}`},
		{"override wins", map[string]any{"input": "hi", "temperature": 0.5}, map[string]any{"temperature": 1.0}, nil, `{"input":"hi","temperature":1}`},
		{"seed", map[string]any{"input": "hi"}, nil, &seed, `{"input":"hi","metadata":{"extra_body":"{\"seed\":3}"}}`},
		{"seed merged into extra_body", map[string]any{"input": "hi", "metadata": map[string]any{"user": "u", "extra_body": `{"top_k":5,"seed":1}`}}, nil, &seed,
			`{"input":"hi","metadata":{"extra_body":"{\"seed\":3,\"top_k\":5}","user":"u"}}`},
		{"extra_body not an object", map[string]any{"input": "hi", "metadata": map[string]any{"extra_body": "[1]"}}, nil, &seed, `{"input":"hi","metadata":{"extra_body":"{\"seed\":3}"}}`},
		{"no seed asked", map[string]any{"input": "hi", "metadata": map[string]any{"extra_body": "{}"}}, nil, nil, `{"input":"hi","metadata":{"extra_body":"{}"}}`},
		{"names", map[string]any{"input": "hi", "max_output_tokens": 10, "reasoning": map[string]any{"summary": "auto"}},
			map[string]any{"max_tokens": 64, "reasoning_effort": "low", "top_p": 0.9}, nil,
			`{"input":"hi","max_output_tokens":64,"reasoning":{"effort":"low","summary":"auto"},"top_p":0.9}`},
		{"max_tokens first", map[string]any{"input": "hi"}, map[string]any{"max_tokens": 64, "max_completion_tokens": 32}, nil, `{"input":"hi","max_output_tokens":64}`},
		{"max_completion_tokens", map[string]any{"input": "hi"}, map[string]any{"max_completion_tokens": 32}, nil, `{"input":"hi","max_output_tokens":32}`},
	}
	for _, tt := range tests {
		before, _ := json.Marshal(tt.rcp)
		got, _ := json.Marshal(nemogym.Overridden(tt.rcp, tt.params, tt.seed))
		if string(got) != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
		if after, _ := json.Marshal(tt.rcp); string(after) != string(before) {
			t.Errorf("%s: the row's params changed to %s", tt.name, after)
		}
	}
}
