package generate_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/generate"
)

// replyServer answers every request with resp.
type replyServer struct{ resp inference.Response }

func (s *replyServer) Complete(context.Context, *inference.Request) (*inference.Response, error) {
	r := s.resp
	r.Message.TokenIDs = slices.Clone(s.resp.Message.TokenIDs)
	return &r, nil
}

// A chat reply without token ids (Ollama, OpenAI, SGLang's OpenAI API)
// leaves the training view's counts unknown (TokenIDsMissing: null
// columns), and logprobs it brings without ids are not kept (they have no
// place in the sequence); a reply with ids keeps ids and logprobs.
func TestTokenIDsMissing(t *testing.T) {
	lp := []float32{-0.5, -1, -0.25}
	tests := []struct {
		name     string
		resp     inference.Response
		missing  bool
		logprobs []float32
	}{
		{"ids and logprobs", inference.Response{PromptTokenIDs: []int32{1, 2}, CompletionTokens: 3,
			Message: pipeline.Message{Content: "a b c", TokenIDs: []int32{7, 8, 9}, Logprobs: lp}}, false, lp},
		{"logprobs without ids", inference.Response{CompletionTokens: 3,
			Message: pipeline.Message{Content: "a b c", Logprobs: lp}}, true, nil},
		{"text without ids or usage", inference.Response{Message: pipeline.Message{Content: "a b c"}}, true, nil},
		{"reply ids without prompt ids", inference.Response{CompletionTokens: 3,
			Message: pipeline.Message{Content: "a b c", TokenIDs: []int32{7, 8, 9}, Logprobs: lp}}, true, lp},
		{"prompt ids, nothing generated", inference.Response{PromptTokenIDs: []int32{1, 2}}, false, nil},
		{"step-wise, ids", inference.Response{PromptTokenIDs: []int32{1, 2}, CompletionTokens: 3,
			Message: pipeline.Message{Content: "a b c", TokenIDs: []int32{7, 8, 9}, Logprobs: lp}}, false, nil},
		{"step-wise, no ids", inference.Response{CompletionTokens: 3,
			Message: pipeline.Message{Content: "a b c", Logprobs: lp}}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.resp.FinishReason = "stop"
			opts := generate.Options{Model: "m", API: "chat"}
			if strings.HasPrefix(tt.name, "step-wise") {
				// Each step a prompt of its own: the row's training view
				// stays empty, its counts 0 where known.
				opts.StepPrompt = func(r *pipeline.Rollout) ([]pipeline.Message, bool) { return r.Messages[:1], true }
			}
			g, err := generate.New(&replyServer{resp: tt.resp}, opts)
			if err != nil {
				t.Fatal(err)
			}
			task := &pipeline.Task{Index: 0, Messages: []pipeline.Message{{Role: pipeline.RoleUser, Content: "hi"}}}
			r := &pipeline.Rollout{Task: task, GroupSize: 1, Seed: 1, Messages: slices.Clone(task.Messages)}
			if err := g.Turn(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if r.TokenIDsMissing != tt.missing || r.SeqCountsKnown() == tt.missing {
				t.Errorf("TokenIDsMissing = %v, want %v", r.TokenIDsMissing, tt.missing)
			}
			if !slices.Equal(r.ResponseLogprobs, tt.logprobs) {
				t.Errorf("response logprobs = %v, want %v", r.ResponseLogprobs, tt.logprobs)
			}
			if r.CompletionTokens != tt.resp.CompletionTokens {
				t.Errorf("completion tokens = %d, want the usage's %d", r.CompletionTokens, tt.resp.CompletionTokens)
			}
		})
	}
}

// The errors of a token-id API name the API configured: generate.api:
// sglang satisfies what tokens does, and its errors say sglang.
func TestTokenAPIErrorsNameTheAPI(t *testing.T) {
	tests := []struct {
		api  inference.API
		opts generate.Options
		want string
	}{
		{"tokens", generate.Options{}, "generate.api: tokens needs a backend that tokenizes"},
		{"sglang", generate.Options{}, "generate.api: sglang needs a backend that tokenizes"},
		{"chat", generate.Options{ObservationTokens: "raw"}, "env.observation_tokens: raw needs generate.api: tokens or sglang"},
	}
	for _, tt := range tests {
		t.Run(string(tt.api), func(t *testing.T) {
			tt.opts.API, tt.opts.Model = tt.api, "m"
			_, err := generate.New(&replyServer{}, tt.opts)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("New = %v, want %q", err, tt.want)
			}
		})
	}
}

// failServer refuses every request.
type failServer struct{}

func (failServer) Complete(context.Context, *inference.Request) (*inference.Response, error) {
	return nil, &inference.Error{Class: inference.ClassHTTP, Status: 400, Msg: "refused"}
}

// A rollout that failed before any reply has nothing unknown: its
// training view is empty and its counts are 0, not null.
func TestNoReplyCountsKnown(t *testing.T) {
	g, err := generate.New(failServer{}, generate.Options{Model: "m", API: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	task := &pipeline.Task{Index: 0, Messages: []pipeline.Message{{Role: pipeline.RoleUser, Content: "hi"}}}
	r := &pipeline.Rollout{Task: task, GroupSize: 1, Seed: 1, Messages: slices.Clone(task.Messages)}
	if err := g.Turn(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if r.Status != pipeline.StatusError || r.TokenIDsMissing {
		t.Errorf("status %q, TokenIDsMissing %v; want an error row with known (0) counts", r.Status, r.TokenIDsMissing)
	}
}
