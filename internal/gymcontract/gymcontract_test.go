package gymcontract_test

import (
	"strings"
	"testing"

	"github.com/trajflow/trajflow/internal/gymcontract"
)

func TestModelsLoad(t *testing.T) {
	m, err := gymcontract.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Gym.Revision) != 40 {
		t.Fatalf("the models name no Gym revision: %q", m.Gym.Revision)
	}
	for _, name := range []string{"NeMoGymResponseCreateParamsNonStreaming", "BaseSeedSessionRequest", "BaseVerifyRequest", "BaseVerifyResponse", "AggregateMetricsRequest", "ToolCallRequest"} {
		if m.Models[name] == nil {
			t.Errorf("model %s is not transcribed", name)
		}
	}
	if got := m.Models["NeMoGymResponseCreateParamsNonStreaming"].Extra; got != "forbid" {
		t.Errorf("responses_create_params extra %q, want forbid", got)
	}
}

const response = `{"id":"resp_1","object":"response","created_at":1764226800,"model":"m","output":[{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"7","annotations":[]}]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}","id":"c1","status":"completed"},{"type":"function_call_output","call_id":"c1","output":"42"},{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"think"}]}],"tool_choice":"auto","parallel_tool_calls":true,"tools":[],"status":"completed","incomplete_details":null,"usage":{"input_tokens":3,"input_tokens_details":{"cached_tokens":null},"output_tokens":1,"output_tokens_details":{"reasoning_tokens":null},"total_tokens":4}}`

func TestValidate(t *testing.T) {
	m, err := gymcontract.Load()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, model, body string
		want              []string // empty: valid
	}{
		{"seed session", "BaseSeedSessionRequest", `{"responses_create_params":{"input":"hi","seed":3},"anything":1}`, nil},
		{"verify", "BaseVerifyRequest", `{"responses_create_params":{"input":[{"role":"user","content":"hi","type":"message"}],"metadata":{"extra_body":"{\"seed\":3}"},"temperature":1,"max_output_tokens":64},"response":` + response + `,"expected_answer":"7"}`, nil},
		{"verify with a seed", "BaseVerifyRequest", `{"responses_create_params":{"input":"hi","seed":3},"response":` + response + `}`,
			[]string{"body.responses_create_params.seed: extra_forbidden"}},
		{"any extra key", "BaseRunRequest", `{"responses_create_params":{"input":"hi","top_k":5}}`, []string{"body.responses_create_params.top_k: extra_forbidden"}},
		{"no input", "BaseRunRequest", `{"responses_create_params":{}}`, []string{"body.responses_create_params: input: missing"}},
		{"no params", "BaseRunRequest", `{"input":"hi"}`, []string{"body: responses_create_params: missing"}},
		{"metadata values are strings", "BaseRunRequest", `{"responses_create_params":{"input":"hi","metadata":{"extra_body":{"seed":3}}}}`, []string{"body.responses_create_params.metadata.extra_body: string_type"}},
		{"bad item", "BaseRunRequest", `{"responses_create_params":{"input":[{"type":"message","role":"tool","content":"x"}]}}`, []string{"body.responses_create_params.input: no member of the union matches"}},
		{"int from float", "BaseRunRequest", `{"responses_create_params":{"input":"hi","max_output_tokens":1.5}}`, []string{"int_from_float"}},
		{"verify answer", "BaseVerifyResponse", `{"responses_create_params":{"input":"hi"},"response":` + response + `,"reward":1}`, nil},
		{"no reward", "BaseVerifyResponse", `{"responses_create_params":{"input":"hi"},"response":` + response + `}`, []string{"body: reward: missing"}},
		{"bad usage", "BaseVerifyResponse", `{"responses_create_params":{"input":"hi"},"response":` + strings.Replace(response, `"total_tokens":4`, `"total_tokens":"4"`, 1) + `,"reward":1}`,
			[]string{"body.response.usage: no member of the union matches", "total_tokens: int_type"}},
		{"aggregate", "AggregateMetricsRequest", `{"verify_responses":[{"reward":1,"_ng_task_index":0}]}`, nil},
		{"aggregate not a list", "AggregateMetricsRequest", `{"verify_responses":{}}`, []string{"body.verify_responses: list_type"}},
		{"training item", "NeMoGymResponse", strings.Replace(response, `"id":"c1","status":"completed"}`, `"id":"c1","status":"completed","prompt_token_ids":[1,2],"generation_token_ids":[3],"generation_log_probs":[-0.5]}`, 1), nil},
		{"training item as its variant", "NeMoGymResponseFunctionToolCallForTraining", `{"type":"function_call","call_id":"c1","name":"f","arguments":"{}","prompt_token_ids":[1,2],"generation_token_ids":[3],"generation_log_probs":[-0.5]}`, nil},
		{"variant without its ids", "NeMoGymResponseOutputMessageForTraining", `{"type":"message","id":"m","role":"assistant","content":[]}`, []string{"prompt_token_ids: missing"}},
		{"token fields are atomic", "NeMoGymResponse", strings.Replace(response, `"id":"c1","status":"completed"}`, `"id":"c1","status":"completed","prompt_token_ids":[1,2],"generation_token_ids":[3]}`, 1),
			[]string{"body.output.1: value_error: Token metadata must include all required fields; missing: generation_log_probs"}},
		{"token ids are ints", "NeMoGymResponse", strings.Replace(response, `"id":"c1","status":"completed"}`, `"id":"c1","status":"completed","prompt_token_ids":[1.5],"generation_token_ids":[3],"generation_log_probs":[-0.5]}`, 1),
			[]string{"int_from_float"}},
		{"tool call", "ToolCallRequest", `{"amount":3}`, nil},
		{"tool call not an object", "ToolCallRequest", `[3]`, []string{"body: model_type"}},
		{"not JSON", "ToolCallRequest", `{`, []string{"body is not JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := m.Validate(tt.model, []byte(tt.body))
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("valid; want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseBadModels(t *testing.T) {
	for name, body := range map[string]string{
		"not JSON":      `{`,
		"bad extra":     `{"models":{"A":{"extra":"maybe","fields":{}}}}`,
		"no policy":     `{"models":{"A":{"fields":{}}}}`,
		"unknown model": `{"models":{"A":{"extra":"ignore","fields":{"x":{"type":"B"}}}}}`,
		"bad type":      `{"models":{"A":{"extra":"ignore","fields":{"x":{"type":"list<int"}}}}}`,
		"bad member":    `{"models":{"A":{"union":["B"]}}}`,
	} {
		if _, err := gymcontract.Parse([]byte(body)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func FuzzParseType(f *testing.F) {
	for _, s := range []string{"int", "list<map<string>>|null", "=auto|=disabled", "A|list<B>", "list<", ">", "|", "=", "map<int>>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		typ, err := gymcontract.ParseType(s)
		if err != nil {
			return
		}
		if typ == nil || typ.Kind == "" {
			t.Fatalf("%q parsed to %+v", s, typ)
		}
	})
}
