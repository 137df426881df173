package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/envs/tools"
	"github.com/trajflow/trajflow/pipeline"
)

func newEnv(t testing.TB, values map[string]any) envs.Env {
	t.Helper()
	e, err := envs.New("tools", envs.Options{Section: "env", Values: values})
	if err != nil {
		t.Fatalf("envs.New: %v", err)
	}
	return e
}

func call(id, name, args string) pipeline.ToolCall {
	return pipeline.ToolCall{ID: id, Type: "function", Name: name, Arguments: args}
}

// toolNames returns the function names of OpenAI tool definitions, checking
// their shape on the way.
func toolNames(t *testing.T, defs []json.RawMessage) []string {
	t.Helper()
	var names []string
	for _, d := range defs {
		var def struct {
			Type     string `json:"type"`
			Function struct {
				Name        string `json:"name"`
				Description string `json:"description"`
				Parameters  struct {
					Type       string                     `json:"type"`
					Properties map[string]json.RawMessage `json:"properties"`
					Required   []string                   `json:"required"`
				} `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(d, &def); err != nil {
			t.Fatalf("tool definition %s: %v", d, err)
		}
		f := def.Function
		if def.Type != "function" || f.Name == "" || f.Description == "" || f.Parameters.Type != "object" || len(f.Parameters.Required) != 1 {
			t.Fatalf("tool definition %s is not an OpenAI function tool", d)
		}
		if _, ok := f.Parameters.Properties[f.Parameters.Required[0]]; !ok {
			t.Fatalf("tool definition %s requires an undefined property", d)
		}
		names = append(names, f.Name)
	}
	return names
}

func TestReset(t *testing.T) {
	for _, tt := range []struct {
		values map[string]any
		want   string
	}{
		{nil, "calculator,submit_answer"},
		{map[string]any{"tools": []any{"submit_answer"}}, "submit_answer"},
		{map[string]any{"tools": []any{}}, ""},
	} {
		reset, err := newEnv(t, tt.values).Reset(context.Background(), &pipeline.Rollout{Task: &pipeline.Task{}})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(toolNames(t, reset.Tools), ","); got != tt.want {
			t.Errorf("tools %v: offered %q, want %q", tt.values, got, tt.want)
		}
		if len(reset.Observations) != 0 {
			t.Errorf("tools %v: observations %+v", tt.values, reset.Observations)
		}
	}
}

func TestStep(t *testing.T) {
	type obs struct{ id, name, content string }
	tests := []struct {
		name       string
		options    map[string]any
		fields     map[string]any
		state      any
		msg        pipeline.Message
		obs        []obs
		reward     float64
		terminated bool
		metrics    map[string]float64
		err        []string
	}{
		{
			name:    "calculator",
			msg:     pipeline.Message{ToolCalls: []pipeline.ToolCall{call("c1", "calculator", `{"expression":"(12.5+3)*4"}`)}},
			obs:     []obs{{"c1", "calculator", "62"}},
			metrics: map[string]float64{"tool_calls": 1, "tool_errors": 0},
		},
		{
			name:  "counts carry over in the state",
			state: tools.State{Calls: 3, Errors: 1},
			msg: pipeline.Message{ToolCalls: []pipeline.ToolCall{
				call("a", "calculator", `{"expression":"1/3"}`),
				call("b", "calculator", `{"expression":"1/0"}`),
			}},
			obs:     []obs{{"a", "calculator", "0.333333333333333"}, {"b", "calculator", "error: at position 2: division by zero"}},
			metrics: map[string]float64{"tool_calls": 5, "tool_errors": 2},
		},
		{
			name: "model errors come back as tool messages",
			msg: pipeline.Message{ToolCalls: []pipeline.ToolCall{
				call("1", "calculator", `{"expression":`),
				call("2", "calculator", `{"expr":"1+1"}`),
				call("3", "calculator", `{"expression":["1"]}`),
				call("4", "search", `{"q":"x"}`),
				call("5", "calculator", ``),
			}},
			obs: []obs{
				{"1", "calculator", "error: arguments are not a JSON object"},
				{"2", "calculator", `error: missing argument "expression"`},
				{"3", "calculator", `error: argument "expression" must be a string`},
				{"4", "search", `error: unknown tool "search" (available: calculator, submit_answer)`},
				{"5", "calculator", `error: missing argument "expression"`},
			},
			metrics: map[string]float64{"tool_calls": 5, "tool_errors": 5},
		},
		{
			name:    "disabled tool is unknown",
			options: map[string]any{"tools": []any{"submit_answer"}},
			msg:     pipeline.Message{ToolCalls: []pipeline.ToolCall{call("1", "calculator", `{"expression":"1"}`)}},
			obs:     []obs{{"1", "calculator", `error: unknown tool "calculator" (available: submit_answer)`}},
			metrics: map[string]float64{"tool_calls": 1, "tool_errors": 1},
		},
		{
			name:   "submit right answer",
			fields: map[string]any{"expected_answer": "0.75"},
			msg:    pipeline.Message{ToolCalls: []pipeline.ToolCall{call("s", "submit_answer", `{"answer":"3/4"}`)}},
			obs:    []obs{{"s", "submit_answer", "answer submitted"}},
			reward: 1, terminated: true,
			metrics: map[string]float64{"tool_calls": 1, "tool_errors": 0, "acc": 1},
		},
		{
			name:   "submit a number",
			fields: map[string]any{"expected_answer": 42.0},
			msg:    pipeline.Message{ToolCalls: []pipeline.ToolCall{call("s", "submit_answer", `{"answer":42}`)}},
			obs:    []obs{{"s", "submit_answer", "answer submitted"}},
			reward: 1, terminated: true,
			metrics: map[string]float64{"tool_calls": 1, "tool_errors": 0, "acc": 1},
		},
		{
			name:   "submit wrong answer, then a late call",
			fields: map[string]any{"expected_answer": "7"},
			msg: pipeline.Message{ToolCalls: []pipeline.ToolCall{
				call("s", "submit_answer", `{"answer":"8"}`),
				call("c", "calculator", `{"expression":"3+4"}`),
			}},
			obs:    []obs{{"s", "submit_answer", "answer submitted"}, {"c", "calculator", "not run: the answer was already submitted"}},
			reward: 0, terminated: true,
			metrics: map[string]float64{"tool_calls": 2, "tool_errors": 0, "acc": 0},
		},
		{
			name:    "answer in text",
			options: map[string]any{"answer_field": "solution"},
			fields:  map[string]any{"solution": "12"},
			msg:     pipeline.Message{Content: `So the total is \boxed{12}.`},
			reward:  1, terminated: true,
			metrics: map[string]float64{"tool_calls": 0, "tool_errors": 0, "acc": 1},
		},
		{
			name:   "text answer without a number",
			fields: map[string]any{"expected_answer": "Paris"},
			msg:    pipeline.Message{Content: " paris "},
			reward: 1, terminated: true,
			metrics: map[string]float64{"tool_calls": 0, "tool_errors": 0, "acc": 1},
		},
		{
			name:   "missing answer field",
			fields: map[string]any{"question": "?"},
			msg:    pipeline.Message{ToolCalls: []pipeline.ToolCall{call("s", "submit_answer", `{"answer":"1"}`)}},
			err:    []string{"tools.jsonl:5", `"expected_answer"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t, tt.options)
			r := &pipeline.Rollout{Task: &pipeline.Task{Source: "tools.jsonl:5", Fields: tt.fields}}
			reset, err := env.Reset(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			r.State = reset.State
			if tt.state != nil {
				r.State = tt.state
			}
			msg := tt.msg
			msg.Role, msg.Turn = pipeline.RoleAssistant, 2
			r.Messages = append(r.Messages, msg)
			step, err := env.Step(context.Background(), r, msg)
			if tt.err != nil {
				if err == nil {
					t.Fatal("Step succeeded, want an error")
				}
				for _, w := range tt.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Step: %v", err)
			}
			if len(step.Observations) != len(tt.obs) {
				t.Fatalf("observations %+v, want %d", step.Observations, len(tt.obs))
			}
			for i, o := range step.Observations {
				w := tt.obs[i]
				if o.Role != pipeline.RoleTool || o.ToolCallID != w.id || o.Name != w.name || o.Turn != 2 || !strings.HasPrefix(o.Content, w.content) {
					t.Errorf("observation %d = %+v, want tool message %v", i, o, w)
				}
			}
			if step.Reward != tt.reward || step.Terminated != tt.terminated {
				t.Errorf("reward %v terminated %v, want %v %v", step.Reward, step.Terminated, tt.reward, tt.terminated)
			}
			if fmt.Sprint(step.Metrics) != fmt.Sprint(tt.metrics) {
				t.Errorf("metrics %v, want %v", step.Metrics, tt.metrics)
			}
			// An action is invalid when a call names no enabled tool or
			// lacks its argument; a calculation error is a valid action.
			invalid := false
			for _, o := range step.Observations {
				if strings.Contains(o.Content, "unknown tool") || strings.Contains(o.Content, "missing argument") || strings.Contains(o.Content, "not a JSON object") || strings.Contains(o.Content, "must be a string") {
					invalid = true
				}
			}
			if !step.ReportsValidity || step.InvalidAction != invalid {
				t.Errorf("invalid %v reports %v, want invalid %v", step.InvalidAction, step.ReportsValidity, invalid)
			}
			if st, ok := step.State.(tools.State); !ok || float64(st.Calls) != tt.metrics["tool_calls"] {
				t.Errorf("state %#v", step.State)
			}
		})
	}
}

func TestRegistry(t *testing.T) {
	for _, tt := range []struct {
		values map[string]any
		want   string
	}{
		{map[string]any{"tool": []any{"calculator"}}, "env.tool: unknown option"},
		{map[string]any{"tools": []any{"calculator", "browser"}}, `env.tools: unknown tool "browser" (have calculator, submit_answer)`},
		{map[string]any{"tools": []any{"calculator", "calculator"}}, `env.tools: "calculator" is listed twice`},
		{map[string]any{"tools": "calculator"}, "env.tools"},
		{map[string]any{"answer_field": ""}, "env.answer_field: must not be empty"},
	} {
		if _, err := envs.New("tools", envs.Options{Section: "env", Values: tt.values}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%v): err = %v, want %q", tt.values, err, tt.want)
		}
	}
	if _, err := envs.New("tool", envs.Options{Section: "env"}); err == nil || !strings.Contains(err.Error(), "tools") {
		t.Errorf("unknown env: err = %v", err)
	}
}

func Example() {
	env, err := envs.New("tools", envs.Options{Section: "env"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	r := &pipeline.Rollout{Task: &pipeline.Task{Fields: map[string]any{"expected_answer": "62"}}}
	reset, _ := env.Reset(ctx, r)
	r.State = reset.State
	fmt.Println(len(reset.Tools), "tools")

	turns := []pipeline.ToolCall{
		{ID: "call_1", Type: "function", Name: "calculator", Arguments: `{"expression": "(12.5 + 3) * 4"}`},
		{ID: "call_2", Type: "function", Name: "submit_answer", Arguments: `{"answer": "62"}`},
	}
	for _, tc := range turns {
		step, err := env.Step(ctx, r, pipeline.Message{Role: "assistant", ToolCalls: []pipeline.ToolCall{tc}})
		if err != nil {
			panic(err)
		}
		r.State = step.State
		fmt.Printf("%s: %s (reward %v, done %v)\n", step.Observations[0].Name, step.Observations[0].Content, step.Reward, step.Terminated)
	}
	// Output:
	// 2 tools
	// calculator: 62 (reward 0, done false)
	// submit_answer: answer submitted (reward 1, done true)
}
