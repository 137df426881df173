package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/trajflow/trajflow/internal/gymcontract"
	"github.com/trajflow/trajflow/pipeline"
)

// tokenModel answers with a fixed answer (token ids included), counting
// calls and keeping the last call.
type tokenModel struct {
	n    atomic.Int64
	ans  Answer
	last atomic.Pointer[Call]
}

func (m *tokenModel) Call(ctx context.Context, c *Call) (*Answer, error) {
	m.n.Add(1)
	m.last.Store(c)
	a := m.ans
	return &a, nil
}

func gymBody(session string, extra string) string {
	md := ""
	if session != "" {
		md = `,"metadata":{"extra_body":"{\"seed\":3}","trajflow_session":"` + session + `"}`
	}
	return `{"input":[{"role":"user","content":"Deposit 7.","type":"message"}],"tools":[{"type":"function","name":"deposit","parameters":{},"strict":true}],"parallel_tool_calls":true,"tool_choice":"auto"` + md + extra + `}`
}

// TestGymRouteAnswersAsVLLMModel: POST /v1/responses at the root is
// attributed by metadata.trajflow_session and answered as Gym's
// vllm_model answers: a response that validates with Gym's NeMoGymResponse,
// whose last output item is the ForTraining variant carrying the call's
// prompt ids, generated ids and logprobs exactly. The same answer on the
// session route carries none of them.
func TestGymRouteAnswersAsVLLMModel(t *testing.T) {
	models, err := gymcontract.Load()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		msg     pipeline.Message
		prompt  []int32
		variant string // "" : no token fields
	}{
		{"text", pipeline.Message{Role: pipeline.RoleAssistant, Content: "7", TokenIDs: []int32{55, 2}, Logprobs: []float32{-0.25, -1}}, []int32{1, 2, 3}, "NeMoGymResponseOutputMessageForTraining"},
		{"tool call", pipeline.Message{Role: pipeline.RoleAssistant, ToolCalls: []pipeline.ToolCall{{ID: "c1", Name: "deposit", Arguments: `{"amount":7}`}}, TokenIDs: []int32{9, 8, 7}, Logprobs: []float32{0, -0.5, -2}}, []int32{4}, "NeMoGymResponseFunctionToolCallForTraining"},
		{"text and two calls", pipeline.Message{Role: pipeline.RoleAssistant, Content: "ok", ToolCalls: []pipeline.ToolCall{{ID: "a", Name: "deposit", Arguments: `{}`}, {ID: "b", Name: "deposit", Arguments: `{}`}}, TokenIDs: []int32{1}, Logprobs: []float32{-1}}, []int32{5, 6}, "NeMoGymResponseFunctionToolCallForTraining"},
		{"no ids", pipeline.Message{Role: pipeline.RoleAssistant, Content: "7"}, nil, ""},
		{"ids without logprobs", pipeline.Message{Role: pipeline.RoleAssistant, Content: "7", TokenIDs: []int32{3}}, []int32{1}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t, Options{Model: "policy"})
			m := &tokenModel{ans: Answer{Message: tt.msg, PromptTokenIDs: tt.prompt, PromptTokens: len(tt.prompt), CompletionTokens: len(tt.msg.TokenIDs)}}
			s := srv.Open(m)
			defer s.End()
			code, body, _ := do(t, request{url: "http://" + srv.Addr() + "/v1/responses", body: gymBody(s.ID, "")})
			if code != http.StatusOK {
				t.Fatalf("HTTP %d: %s", code, body)
			}
			if err := models.Validate("NeMoGymResponse", body); err != nil {
				t.Fatalf("not Gym's response: %v\n%s", err, body)
			}
			var resp struct {
				Model  string           `json:"model"`
				Output []map[string]any `json:"output"`
			}
			if err := json.Unmarshal(body, &resp); err != nil {
				t.Fatal(err)
			}
			if resp.Model != "policy" {
				t.Errorf("model %q, want the gateway's", resp.Model)
			}
			last := resp.Output[len(resp.Output)-1]
			for _, it := range resp.Output[:len(resp.Output)-1] {
				if _, ok := it["prompt_token_ids"]; ok {
					t.Errorf("token fields on an item before the last: %v", it)
				}
			}
			if tt.variant == "" {
				if _, ok := last["prompt_token_ids"]; ok {
					t.Fatalf("token fields without ids and logprobs: %v", last)
				}
				return
			}
			raw, _ := json.Marshal(last)
			if err := models.Validate(tt.variant, raw); err != nil {
				t.Fatalf("last item: %v", err)
			}
			if got, want := ints(last["prompt_token_ids"]), tt.prompt; !equal32(got, want) {
				t.Errorf("prompt_token_ids %v, want %v", got, want)
			}
			if got, want := ints(last["generation_token_ids"]), tt.msg.TokenIDs; !equal32(got, want) {
				t.Errorf("generation_token_ids %v, want %v", got, want)
			}
			lps, _ := last["generation_log_probs"].([]any)
			for i, lp := range lps {
				if float32(lp.(float64)) != tt.msg.Logprobs[i] {
					t.Errorf("generation_log_probs %v, want %v", lps, tt.msg.Logprobs)
				}
			}
			// The session route stays plain OpenAI.
			code, body, _ = do(t, request{url: s.OpenAIBaseURL + "/responses", body: gymBody("", ""), header: bearer(s.Key)})
			if code != http.StatusOK || strings.Contains(string(body), "token_ids") || strings.Contains(string(body), "log_probs") {
				t.Fatalf("session route: HTTP %d: %s", code, body)
			}
		})
	}
}

// TestGymRouteTakesItsOwnOutputBack: Gym's simple agent sends the model's
// earlier output items back as input, token fields included (the
// ForTraining variants): the gateway reads them as the conversation.
func TestGymRouteTakesItsOwnOutputBack(t *testing.T) {
	srv := start(t, Options{Model: "policy"})
	m := &tokenModel{ans: Answer{Message: pipeline.Message{Role: pipeline.RoleAssistant, Content: "7"}}}
	s := srv.Open(m)
	defer s.End()
	body := `{"input":[{"role":"user","content":"Deposit 7.","type":"message"},` +
		`{"arguments":"{\"amount\":7}","call_id":"c1","name":"deposit","type":"function_call","id":"c1","status":"completed","prompt_token_ids":[1,2],"generation_token_ids":[3],"generation_log_probs":[-0.5],"routed_experts":null},` +
		`{"call_id":"c1","output":"{\"balance\": 7}","type":"function_call_output"},` +
		`{"id":"msg_1","content":[{"annotations":[],"text":"thinking","type":"output_text","logprobs":null}],"role":"assistant","status":"completed","type":"message","prompt_token_ids":[1],"generation_token_ids":[2],"generation_log_probs":[0]}],` +
		`"metadata":{"trajflow_session":"` + s.ID + `"},"background":null,"top_logprobs":null,"previous_response_id":null,"prompt":null,"stream":false}`
	code, out, _ := do(t, request{url: "http://" + srv.Addr() + "/v1/responses", body: body})
	if code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", code, out)
	}
	c := m.last.Load()
	if len(c.Messages) != 4 || c.Messages[1].ToolCalls[0].ID != "c1" || c.Messages[2].Role != pipeline.RoleTool || c.Messages[3].Content != "thinking" {
		t.Fatalf("conversation %+v", c.Messages)
	}
}

// TestGymRouteRefusesUnattributedCalls: a call on the root route that
// names no open session is refused in OpenAI's error shape, saying why,
// and reaches no Model.
func TestGymRouteRefusesUnattributedCalls(t *testing.T) {
	srv := start(t, Options{Model: "policy"})
	m := &tokenModel{ans: Answer{Message: pipeline.Message{Role: pipeline.RoleAssistant, Content: "7"}}}
	open := srv.Open(m)
	defer open.End()
	ended := srv.Open(m)
	ended.End()
	root := "http://" + srv.Addr() + "/v1/responses"
	tests := []struct {
		name, method, body string
		status             int
		param, msg         string
	}{
		{"no metadata", "", gymBody("", ""), 400, "metadata.trajflow_session", "this call has no metadata"},
		{"no session key", "", strings.Replace(gymBody("", ""), `"tool_choice":"auto"`, `"tool_choice":"auto","metadata":{"user":"x"}`, 1), 400, "metadata.trajflow_session", "no such key"},
		{"session not a string", "", strings.Replace(gymBody("", ""), `"tool_choice":"auto"`, `"tool_choice":"auto","metadata":{"trajflow_session":7}`, 1), 400, "metadata.trajflow_session", "must be a non-empty string"},
		{"metadata not an object", "", strings.Replace(gymBody("", ""), `"tool_choice":"auto"`, `"tool_choice":"auto","metadata":"x"`, 1), 400, "metadata", "must be an object"},
		{"unknown session", "", gymBody(strings.Repeat("0", 32), ""), 404, "metadata.trajflow_session", "no open session has this id"},
		{"ended session", "", gymBody(ended.ID, ""), 404, "metadata.trajflow_session", "no open session has this id"},
		{"streamed", "", gymBody(open.ID, `,"stream":true`), 400, "stream", "answers whole"},
		{"not JSON", "", `{`, 400, "", "JSON"},
		{"GET", http.MethodGet, "", 405, "", "use POST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, _ := do(t, request{method: tt.method, url: root, body: tt.body})
			if code != tt.status {
				t.Fatalf("HTTP %d, want %d: %s", code, tt.status, body)
			}
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Type == "" {
				t.Fatalf("not OpenAI's error shape: %s", body)
			}
			if !strings.Contains(e.Error.Message, tt.msg) {
				t.Errorf("message %q does not say %q", e.Error.Message, tt.msg)
			}
			if tt.param != "" && (e.Error.Param == nil || *e.Error.Param != tt.param) {
				t.Errorf("param %v, want %s", e.Error.Param, tt.param)
			}
			if strings.Contains(string(body), open.Key) {
				t.Fatal("a key in an error")
			}
		})
	}
	if n := m.n.Load(); n != 0 {
		t.Fatalf("%d refused calls reached the model", n)
	}
	if st := srv.Stats(); st.Refused != int64(len(tests)) {
		t.Errorf("refused %d, want %d", st.Refused, len(tests))
	}
}

func ints(v any) []int32 {
	l, _ := v.([]any)
	out := make([]int32, len(l))
	for i, x := range l {
		out[i] = int32(x.(float64))
	}
	return out
}

func equal32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
