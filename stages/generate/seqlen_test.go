package generate_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/generate"
)

// watch records every request's max_tokens and the prompt length the
// server answered with.
type watch struct {
	*sim.Server
	maxTokens, prompts, usage []int
	noIDs                     bool
}

func (w *watch) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	resp, err := w.Server.Complete(ctx, req)
	if err != nil {
		return nil, err
	}
	mt, _ := req.Params["max_tokens"].(int)
	w.maxTokens = append(w.maxTokens, mt)
	w.prompts = append(w.prompts, resp.PromptTokens)
	w.usage = append(w.usage, resp.PromptTokens+resp.CompletionTokens)
	if w.noIDs {
		// A server that reports usage but no token ids.
		resp.PromptTokenIDs, resp.Message.TokenIDs, resp.Message.Logprobs = nil, nil, nil
	}
	return resp, nil
}

// noTok hides the simulator's /tokenize.
type noTok struct{ w *watch }

func (n noTok) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	return n.w.Complete(ctx, req)
}

// turns runs r for three turns, a user observation after each reply.
func turns(t *testing.T, g *generate.Generator, r *pipeline.Rollout) {
	t.Helper()
	for turn := 1; turn <= 3 && r.Status == pipeline.StatusPending; turn++ {
		if err := g.Turn(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if r.Status != pipeline.StatusPending {
			break
		}
		r.Messages = append(r.Messages, pipeline.Message{Role: pipeline.RoleUser, Content: fmt.Sprintf("observation %d: alpha beta gamma delta", turn), Turn: turn})
	}
}

// In chat mode the max_tokens sent never exceeds the room max_seq_len
// leaves after the prompt the server renders: the new observations' ids,
// measured with /tokenize, count before the server's prompt ids bring
// them.
func TestChatMaxTokensWithinRoom(t *testing.T) {
	const msl = 400
	s := sim.New(sim.Options{Seed: 2})
	defer s.Close()
	w := &watch{Server: s}
	g, err := generate.New(w, generate.Options{Model: "sim", API: "chat", MaxSeqLenOf: generate.SeqLen(msl), Params: map[string]any{"max_tokens": 1000}})
	if err != nil {
		t.Fatal(err)
	}
	r := longRollout(30)
	turns(t, g, r)
	if len(w.maxTokens) < 2 {
		t.Fatalf("%d requests", len(w.maxTokens))
	}
	for i := range w.maxTokens {
		if w.prompts[i]+w.maxTokens[i] > msl {
			t.Fatalf("request %d: prompt %d + max_tokens %d > max_seq_len %d", i, w.prompts[i], w.maxTokens[i], msl)
		}
	}
}

// Without /tokenize and token ids, the room is counted from the last
// response's usage.
func TestChatMaxTokensFromUsage(t *testing.T) {
	const msl = 400
	s := sim.New(sim.Options{Seed: 2})
	defer s.Close()
	w := &watch{Server: s, noIDs: true}
	g, err := generate.New(noTok{w}, generate.Options{Model: "sim", API: "chat", MaxSeqLenOf: generate.SeqLen(msl), Params: map[string]any{"max_tokens": 1000}})
	if err != nil {
		t.Fatal(err)
	}
	r := longRollout(30)
	turns(t, g, r)
	if len(w.maxTokens) < 2 || w.maxTokens[0] != msl {
		t.Fatalf("max_tokens %v, want the first capped to %d", w.maxTokens, msl)
	}
	for i := 1; i < len(w.maxTokens); i++ {
		if w.maxTokens[i] > msl-w.usage[i-1] {
			t.Fatalf("request %d: max_tokens %d exceeds the room after the previous sequence (usage %v)", i, w.maxTokens[i], w.usage)
		}
	}
}

// A sequence that exactly reaches max_seq_len with the last observation
// of a terminated trajectory is truncated (NeMo RL's >=); one token more
// room is not.
func TestTruncatedAtExactlyMaxSeqLen(t *testing.T) {
	run := func(msl int) *pipeline.Rollout {
		s := sim.New(sim.Options{Seed: 2})
		defer s.Close()
		g, err := generate.New(s, generate.Options{Model: "sim", API: "tokens", MaxSeqLenOf: generate.SeqLen(msl), Params: map[string]any{"max_tokens": 20}})
		if err != nil {
			t.Fatal(err)
		}
		r := longRollout(6)
		if err := g.Turn(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		// The environment terminates with a last observation.
		r.Messages = append(r.Messages, pipeline.Message{Role: pipeline.RoleUser, Content: "final: well done", Turn: 1})
		r.Terminated = true
		if r.Status == pipeline.StatusPending {
			r.Resolve(pipeline.StatusOK)
		}
		if err := g.Observe(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	full := run(0)
	n := len(full.Tokens())
	if full.Truncated {
		t.Fatal("unbounded run truncated")
	}
	if r := run(n); !r.Truncated || len(r.Tokens()) != n {
		t.Fatalf("max_seq_len %d: %d tokens, truncated %v; want %d tokens, truncated", n, len(r.Tokens()), r.Truncated, n)
	}
	if r := run(n + 1); r.Truncated || len(r.Tokens()) != n {
		t.Fatalf("max_seq_len %d: %d tokens, truncated %v; want %d tokens, not truncated", n+1, len(r.Tokens()), r.Truncated, n)
	}
}

// wordServer is a chat server that reports usage and no token ids (as
// Ollama does) and has no /tokenize: a prompt is as many tokens as its
// messages have words, and each reply is up to 18 words.
type wordServer struct{ usage []int }

func (s *wordServer) Complete(_ context.Context, req *inference.Request) (*inference.Response, error) {
	prompt := 0
	for _, m := range req.Messages {
		prompt += len(strings.Fields(m.Content))
	}
	n := 18
	if mt, ok := req.Params["max_tokens"].(int); ok && mt < n {
		n = max(mt, 0)
	}
	s.usage = append(s.usage, prompt+n)
	return &inference.Response{Message: pipeline.Message{Role: pipeline.RoleAssistant, Content: strings.TrimSpace(strings.Repeat("w ", n))},
		FinishReason: "stop", PromptTokens: prompt, CompletionTokens: n}, nil
}

// In chat mode without token ids the server's usage measures the
// sequence: a turn whose prompt and completion reach max_seq_len (the
// observation grew the prompt past the room counted from the previous
// turn: 391 + 18 = 409 over 400) ends the trajectory truncated, never an
// untruncated row over the bound.
func TestChatUsageOverMaxSeqLenTruncates(t *testing.T) {
	for _, tt := range []struct {
		name      string
		msl       int
		route     bool // the bound is the route's (MaxSeqLenOf)
		usage     []int
		truncated bool
	}{
		{"over", 400, false, []int{373, 409}, true},
		{"over, the route's bound", 400, true, []int{373, 409}, true},
		{"exactly full", 409, false, []int{373, 409}, true},
		{"under", 500, false, []int{373, 409, 445}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := &wordServer{}
			opts := generate.Options{Model: "m", API: "chat", MaxSeqLenOf: generate.SeqLen(tt.msl), Params: map[string]any{"max_tokens": 1000}}
			if tt.route {
				msl := tt.msl
				opts.MaxSeqLenOf = func(r *pipeline.Rollout) int { return map[string]int{"": msl}[r.Env] }
			}
			g, err := generate.New(srv, opts)
			if err != nil {
				t.Fatal(err)
			}
			task := &pipeline.Task{Messages: []pipeline.Message{{Role: pipeline.RoleUser, Content: strings.Repeat("alpha ", 355)}}}
			r := &pipeline.Rollout{Task: task, GroupSize: 1, Seed: 1, Messages: slices.Clone(task.Messages)}
			for turn := 1; turn <= 3 && r.Status == pipeline.StatusPending && !r.Truncated; turn++ {
				if turn > 1 {
					r.Messages = append(r.Messages, pipeline.Message{Role: pipeline.RoleUser, Content: strings.Repeat("beta ", 18), Turn: turn - 1})
				}
				if err := g.Turn(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(srv.usage, tt.usage) || r.Truncated != tt.truncated || r.Status == pipeline.StatusError {
				t.Fatalf("usage %v, truncated %v, status %s (%s); want usage %v, truncated %v", srv.usage, r.Truncated, r.Status, r.Error, tt.usage, tt.truncated)
			}
		})
	}
}
