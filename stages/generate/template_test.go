package generate_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/generate"
)

// In tokens mode the template parameters of generate.params (and of the
// row's own params) reach every POST /tokenize: the first prompt, the
// observations' renderings and the closing's; with enable_thinking: false
// the first prompt ends with the empty think block, and the observation's
// generation prompt too.
func TestTemplateArgsReachTokenize(t *testing.T) {
	for _, where := range []string{"config", "row"} {
		t.Run(where, func(t *testing.T) {
			c, rec := simHTTP(t, "tokens")
			kwargs := map[string]any{"enable_thinking": false}
			params := map[string]any{"max_tokens": 6}
			r := longRollout(6)
			if where == "config" {
				params["chat_template_kwargs"] = kwargs
			} else {
				r.Task.Params = map[string]any{"chat_template_kwargs": kwargs}
			}
			g, err := generate.New(c, generate.Options{Model: "sim", API: "tokens", Params: params})
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Turn(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			think := sim.Tokenize("<think>\n\n</think>\n\n")
			gen := append([]int32{sim.TokAssistant}, think...)
			if !slices.Equal(r.PromptTokenIDs[len(r.PromptTokenIDs)-len(gen):], gen) {
				t.Fatalf("the first prompt ends %q, want the empty think block", sim.Detokenize(r.PromptTokenIDs, false))
			}
			r.Messages = append(r.Messages, pipeline.Message{Role: pipeline.RoleUser, Content: "try again", Turn: 1})
			if err := g.Turn(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if r.Status == pipeline.StatusError {
				t.Fatalf("rollout failed: %s", r.Error)
			}
			obs := r.Messages[2]
			if got := r.Tokens()[obs.TokenStart:obs.TokenEnd]; !slices.Equal(got[len(got)-len(gen):], gen) {
				t.Fatalf("the observation ends %q, want the empty think block", sim.Detokenize(got, false))
			}
			calls := rec.of("/tokenize")
			if len(calls) < 4 { // the prompt, the delta's two renderings, the closing's two
				t.Fatalf("%d /tokenize calls", len(calls))
			}
			for i, b := range calls {
				var body struct {
					Kwargs map[string]any `json:"chat_template_kwargs"`
				}
				if err := json.Unmarshal(b, &body); err != nil || body.Kwargs["enable_thinking"] != false {
					t.Fatalf("/tokenize call %d lacks chat_template_kwargs: %s", i, b)
				}
			}
			for _, b := range rec.of("/v1/completions") {
				if strings.Contains(string(b), "chat_template_kwargs") {
					t.Fatalf("a token-id completion carries chat_template_kwargs: %s", b)
				}
			}
		})
	}
}

// TemplateArgs picks the template parameters out of a request's params.
func TestTemplateArgs(t *testing.T) {
	got := inference.TemplateArgs(map[string]any{"temperature": 1, "chat_template_kwargs": map[string]any{"enable_thinking": false}, "add_special_tokens": true})
	b, _ := json.Marshal(got)
	if string(b) != `{"add_special_tokens":true,"chat_template_kwargs":{"enable_thinking":false}}` {
		t.Fatalf("TemplateArgs = %s", b)
	}
	if inference.TemplateArgs(map[string]any{"temperature": 1}) != nil {
		t.Fatal("TemplateArgs of no template parameter is not nil")
	}
}

// The same model output gives the same tool call in chat mode (the
// server's parser, as vLLM's hermes parser stores the arguments) and in
// tokens mode (trajflow's parser of the generated text).
func TestToolCallArgumentsSameInBothModes(t *testing.T) {
	tools := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"calc","parameters":{"type":"object","properties":{"expression":{"type":"string"},"n":{"type":"integer"}},"required":["expression","n"]}}}`)}
	calls := map[inference.API]pipeline.ToolCall{}
	for _, api := range []inference.API{inference.APIChat, inference.APITokens} {
		s := sim.New(sim.Options{Seed: 5, ToolCallRate: 1})
		defer s.Close()
		g, err := generate.New(s, generate.Options{Model: "sim", API: api, Params: map[string]any{"max_tokens": 200}})
		if err != nil {
			t.Fatal(err)
		}
		r := longRollout(3)
		r.Tools = tools
		if err := g.Turn(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		m := r.Messages[len(r.Messages)-1]
		if r.Status == pipeline.StatusError || len(m.ToolCalls) != 1 {
			t.Fatalf("%s: %s %s, message %+v", api, r.Status, r.Error, m)
		}
		calls[api] = m.ToolCalls[0]
	}
	c, k := calls["chat"], calls["tokens"]
	if c.Name != k.Name || c.Arguments != k.Arguments || c.Arguments != `{"expression": "sim", "n": 1}` {
		t.Fatalf("chat %s(%s), tokens %s(%s)", c.Name, c.Arguments, k.Name, k.Arguments)
	}
}

// env.observation_tokens: raw tokenises each observation's text alone (no
// template, no closing, no generation prompt), as NeMo RL does; template
// renders them as the next chat request would. env_tokens counts the
// observation's ids either way.
func TestObservationTokens(t *testing.T) {
	obs := []pipeline.Message{
		{Role: pipeline.RoleUser, Content: "Wrong. Try again.", Turn: 1},
		{Role: pipeline.RoleUser, Content: " Hint: add them.", Turn: 1},
	}
	for _, mode := range []string{"raw", "template"} {
		t.Run(mode, func(t *testing.T) {
			s := sim.New(sim.Options{Seed: 4})
			defer s.Close()
			g, err := generate.New(s, generate.Options{Model: "sim", API: "tokens", ObservationTokens: mode, Params: map[string]any{"max_tokens": 5}})
			if err != nil {
				t.Fatal(err)
			}
			r := longRollout(6)
			if err := g.Turn(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			env := r.EnvTokens
			r.Messages = append(r.Messages, obs...)
			if err := g.Turn(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if r.Status == pipeline.StatusError {
				t.Fatalf("rollout failed: %s", r.Error)
			}
			span := r.Tokens()[r.Messages[2].TokenStart:r.Messages[2].TokenEnd]
			want := slices.Concat(sim.Tokenize(obs[0].Content), sim.Tokenize(obs[1].Content))
			if mode == "template" {
				// The cut reply's closing, each message, the generation prompt.
				want = slices.Concat([]int32{sim.TokEnd}, sim.Tokenize("\n"), (sim.Template{}).Render(obs, nil, true))
			}
			if !slices.Equal(span, want) {
				t.Fatalf("observation ids %q, want %q", sim.Detokenize(span, false), sim.Detokenize(want, false))
			}
			if r.EnvTokens-env != len(want) {
				t.Fatalf("env_tokens grew by %d, want %d", r.EnvTokens-env, len(want))
			}
		})
	}
	if _, err := generate.New(sim.New(sim.Options{}), generate.Options{API: "chat", ObservationTokens: "raw"}); err == nil || !strings.Contains(err.Error(), "needs generate.api: tokens or sglang") {
		t.Fatalf("raw in chat mode: %v", err)
	}
}
