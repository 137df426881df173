package runner_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/internal/leak"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
)

// hinter is an embedder's environment: its reset adds a message.
type hinter struct{}

func (hinter) Reset(ctx context.Context, r *pipeline.Rollout) (*envs.Reset, error) {
	return &envs.Reset{Observations: []pipeline.Message{{Role: pipeline.RoleUser, Content: "Show your work."}}}, nil
}

func (hinter) Step(ctx context.Context, r *pipeline.Rollout, a pipeline.Message) (*envs.Step, error) {
	return &envs.Step{Terminated: true}, nil
}

// agentEnv is an embedder's agent environment (envs.Agent): it writes its
// own prompts.
type agentEnv struct{ hinter }

func (agentEnv) Run(ctx context.Context, r *pipeline.Rollout, s envs.Session) (*envs.Step, error) {
	return &envs.Step{Terminated: true}, nil
}

func TestValidate(t *testing.T) {
	defer leak.Check(t)()
	s := sim.New(sim.Options{Seed: 3, Model: "sim-math"})
	defer s.Close()
	// A server without /tokenize, for generate.api: tokens.
	noTokenize := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/tokenize") {
			http.NotFound(w, r)
			return
		}
		s.Handler().ServeHTTP(w, r)
	})
	full := httptest.NewServer(s.Handler())
	defer full.Close()
	partial := httptest.NewServer(noTokenize)
	defer partial.Close()
	tests := []struct {
		name string
		sets []string
		opts runner.ValidateOptions
		// want in the report; problems in the error (none: nil error)
		want, problems []string
	}{
		{"sim", nil, runner.ValidateOptions{Rows: 2},
			[]string{"row 0 (", "row 1 (", "user: Solve: What is 63 + 18?", `"seed":1234`, `"temperature":1`}, nil},
		{"tokens on sim", []string{"generate.api=tokens"}, runner.ValidateOptions{Rows: 1},
			[]string{"/tokenize and a token-id prompt ok"}, nil},
		{"tokens over HTTP", []string{"generate.api=tokens", "generate.endpoints=[" + full.URL + "/v1]"}, runner.ValidateOptions{Rows: 1},
			[]string{"endpoints: 1 ok", "/tokenize and a token-id prompt ok"}, nil},
		{"tokens: the first prompt as rendered with chat_template_kwargs", []string{"generate.api=tokens", "generate.endpoints=[" + full.URL + "/v1]", "generate.params.chat_template_kwargs={enable_thinking: false}"}, runner.ValidateOptions{Rows: 1},
			[]string{`first prompt rendered, with {"chat_template_kwargs":{"enable_thinking":false}}: `, `<|user|>Solve: What is`, `<|end|>\n<|assistant|><think>\n\n</think>\n\n` + "\n"}, nil},
		{"chat: the first prompt as rendered with chat_template_kwargs", []string{"generate.params.chat_template_kwargs={enable_thinking: false}"}, runner.ValidateOptions{Rows: 1},
			[]string{`first prompt rendered, with {"chat_template_kwargs":{"enable_thinking":false}}: `, `<|assistant|><think>\n\n</think>\n\n` + "\n"}, nil},
		{"tokens without /tokenize", []string{"generate.api=tokens", "generate.endpoints=[" + partial.URL + "/v1]"}, runner.ValidateOptions{Rows: 1},
			[]string{"endpoints: 1 ok"}, []string{"generate.api: tokens: POST /tokenize"}},
		{"model not served", []string{"generate.model=other", "generate.endpoints=[" + full.URL + "/v1]"}, runner.ValidateOptions{Rows: 1},
			[]string{"1 of 1 failed"}, []string{`generate.endpoints[0]: `, `the model "other" (generate.model) is not served`}},
		{"embedder's env", nil, runner.ValidateOptions{Rows: 1, Options: runner.Options{Env: hinter{}}},
			[]string{"user: Show your work."}, nil},
		{"prompt within prompt.max_tokens", []string{"generate.api=tokens", "prompt.max_tokens=67"}, runner.ValidateOptions{Rows: 1},
			[]string{"first prompt: 67 tokens, within prompt.max_tokens 67"}, nil},
		{"prompt over prompt.max_tokens, cut", []string{"generate.api=tokens", "prompt.max_tokens=66", "prompt.truncation=middle"}, runner.ValidateOptions{Rows: 1},
			[]string{"first prompt: 67 tokens, over prompt.max_tokens 66: 1 cut (prompt.truncation: middle)"}, nil},
		{"prompt over prompt.max_tokens, error", []string{"generate.api=tokens", "generate.endpoints=[" + full.URL + "/v1]", "prompt.max_tokens=66"}, runner.ValidateOptions{Rows: 1},
			[]string{"first prompt: 67 tokens, over prompt.max_tokens 66: the row would fail (prompt.truncation: error, prompt_too_long)"},
			[]string{"every row rendered (1) would fail before generating a token"}},
		{"an agent's rows are not rendered", nil, runner.ValidateOptions{Rows: 2, Options: runner.Options{Env: agentEnv{}}},
			[]string{"row 0 (", "goes to the agent (env math), which writes its own prompts: nothing rendered", "ok: a run would start"}, nil},
		{"no rows", nil, runner.ValidateOptions{Rows: -1},
			[]string{"env math: started", "ok: a run would start"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := quickstart(t, tt.sets...)
			os.Remove(cfg.Output.Dir) // the test's directory: validate must not make it
			var out bytes.Buffer
			tt.opts.Out = &out
			err := runner.Validate(context.Background(), cfg, tt.opts)
			if _, serr := os.Stat(cfg.Output.Dir); !os.IsNotExist(serr) {
				t.Errorf("validate created %s", cfg.Output.Dir)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("report lacks %q:\n%s", w, &out)
				}
			}
			if len(tt.problems) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v\n%s", err, &out)
				}
				return
			}
			var ve *config.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate: %v (%T), want a *config.ValidationError\n%s", err, err, &out)
			}
			for _, p := range tt.problems {
				if !strings.Contains(err.Error(), p) {
					t.Errorf("error lacks %q:\n%v", p, err)
				}
			}
		})
	}
}
