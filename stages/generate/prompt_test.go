package generate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/generate"
)

// bodies wraps a handler and keeps the body of every request to a path.
type bodies struct {
	next http.Handler
	mu   sync.Mutex
	got  map[string][][]byte
}

func (b *bodies) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	b.mu.Lock()
	b.got[r.URL.Path] = append(b.got[r.URL.Path], body)
	b.mu.Unlock()
	b.next.ServeHTTP(w, r)
}

func (b *bodies) of(path string) [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.got[path])
}

// simHTTP serves the simulator over HTTP behind a request recorder and
// returns a client of it.
func simHTTP(t *testing.T, api inference.API) (*openai.HTTPClient, *bodies) {
	t.Helper()
	s := sim.New(sim.Options{Seed: 3})
	t.Cleanup(s.Close)
	rec := &bodies{next: s.Handler(), got: map[string][][]byte{}}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	c, err := openai.NewHTTP(inference.Config{Endpoints: []string{srv.URL + "/v1"}, Model: "sim", API: api, Concurrency: 2, MaxAttempts: 1}, openai.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, rec
}

func longRollout(words int) *pipeline.Rollout {
	text := "Summarise: " + strings.Repeat("alpha beta gamma ", words/3)
	task := &pipeline.Task{Index: 4, Source: "tasks.jsonl:5", Messages: []pipeline.Message{{Role: pipeline.RoleUser, Content: text}}}
	return &pipeline.Rollout{Task: task, GroupSize: 1, GroupID: "t4-a0", Seed: 1, Messages: slices.Clone(task.Messages)}
}

// The prompt the server receives is the rendered prompt's ids cut to
// exactly prompt.max_tokens, as verl's truncation modes cut them.
func TestPromptTruncationTokens(t *testing.T) {
	const limit = 16
	for _, mode := range []string{"left", "right", "middle"} {
		t.Run(mode, func(t *testing.T) {
			c, rec := simHTTP(t, "tokens")
			full, err := c.Tokenize(context.Background(), &inference.TokenizeRequest{Model: "sim", Messages: longRollout(60).Messages, AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(full) <= limit {
				t.Fatalf("the prompt has %d tokens, want more than %d", len(full), limit)
			}
			var want []int32
			switch mode {
			case "left":
				want = full[len(full)-limit:]
			case "right":
				want = full[:limit]
			case "middle":
				want = slices.Concat(full[:limit/2], full[len(full)-limit/2:])
			}
			g, err := generate.New(c, generate.Options{Model: "sim", API: "tokens", PromptMaxTokens: limit, PromptTruncation: mode,
				Params: map[string]any{"max_tokens": 8}})
			if err != nil {
				t.Fatal(err)
			}
			r := longRollout(60)
			if err := g.Turn(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if r.Status == pipeline.StatusError {
				t.Fatalf("rollout failed: %s", r.Error)
			}
			sent := rec.of("/v1/completions")
			if len(sent) != 1 {
				t.Fatalf("%d completions requests, want 1", len(sent))
			}
			var body struct {
				Prompt []int32 `json:"prompt"`
			}
			if err := json.Unmarshal(sent[0], &body); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(body.Prompt, want) {
				t.Errorf("the server received prompt %v, want %v", body.Prompt, want)
			}
			if !slices.Equal(r.PromptTokenIDs, want) || r.PromptTokensDropped != len(full)-limit {
				t.Errorf("rollout prompt %v dropped %d; want %v dropped %d", r.PromptTokenIDs, r.PromptTokensDropped, want, len(full)-limit)
			}
		})
	}
}

// truncation: error fails the row, naming it, and sends nothing; a prompt
// within the limit goes as it is. Both modes count with the server's
// /tokenize.
func TestPromptTruncationError(t *testing.T) {
	for _, api := range []inference.API{inference.APIChat, inference.APITokens} {
		t.Run(string(api), func(t *testing.T) {
			c, rec := simHTTP(t, api)
			g, err := generate.New(c, generate.Options{Model: "sim", API: api, PromptMaxTokens: 32, PromptTruncation: "error",
				Params: map[string]any{"max_tokens": 8, "return_token_ids": true}})
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Check(context.Background()); err != nil {
				t.Fatal(err)
			}
			before := len(rec.of("/v1/chat/completions")) + len(rec.of("/v1/completions"))
			r := longRollout(60)
			if err := g.Turn(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if r.Status != pipeline.StatusError || r.ErrorClass != generate.ClassPromptTooLong ||
				!strings.HasPrefix(r.Error, "tasks.jsonl:5 (task 4): prompt.max_tokens: the prompt has ") {
				t.Errorf("status %q class %q error %q", r.Status, r.ErrorClass, r.Error)
			}
			if n := len(rec.of("/v1/chat/completions")) + len(rec.of("/v1/completions")); n != before {
				t.Errorf("a too-long prompt was sent (%d requests)", n-before)
			}
			short := longRollout(0)
			if err := g.Turn(context.Background(), short); err != nil {
				t.Fatal(err)
			}
			if short.Status == pipeline.StatusError || short.NumTurns != 1 || short.PromptTokensDropped != 0 {
				t.Errorf("a short prompt: status %q (%s), %d turns, %d dropped", short.Status, short.Error, short.NumTurns, short.PromptTokensDropped)
			}
		})
	}
}

func TestPromptTruncationNeedsTokens(t *testing.T) {
	c, _ := simHTTP(t, "chat")
	_, err := generate.New(c, generate.Options{Model: "sim", API: "chat", PromptMaxTokens: 16, PromptTruncation: "left"})
	if err == nil || !strings.Contains(err.Error(), "prompt.truncation: left needs generate.api: tokens or sglang") {
		t.Errorf("New = %v", err)
	}
}

// Step-wise (a StepPrompt), every step's fresh prompt is cut to
// prompt.max_tokens, and the row records the ids cut over all steps.
func TestPromptTruncationStepWise(t *testing.T) {
	const limit = 16
	c, rec := simHTTP(t, "tokens")
	step := []pipeline.Message{{Role: pipeline.RoleUser, Content: "Step: " + strings.Repeat("north south east west ", 20)}}
	full, err := c.Tokenize(context.Background(), &inference.TokenizeRequest{Model: "sim", Messages: step, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	g, err := generate.New(c, generate.Options{Model: "sim", API: "tokens", PromptMaxTokens: limit, PromptTruncation: "left",
		Params:     map[string]any{"max_tokens": 4},
		StepPrompt: func(*pipeline.Rollout) ([]pipeline.Message, bool) { return step, true }})
	if err != nil {
		t.Fatal(err)
	}
	r := longRollout(60)
	for range 2 {
		if err := g.Turn(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if r.Status == pipeline.StatusError {
			t.Fatalf("rollout failed: %s", r.Error)
		}
	}
	sent := rec.of("/v1/completions")
	if len(sent) != 2 {
		t.Fatalf("%d completions requests, want 2", len(sent))
	}
	for i, b := range sent {
		var body struct {
			Prompt []int32 `json:"prompt"`
		}
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatal(err)
		}
		if want := full[len(full)-limit:]; !slices.Equal(body.Prompt, want) {
			t.Errorf("step %d: the server received prompt %v, want %v", i+1, body.Prompt, want)
		}
	}
	if want := 2 * (len(full) - limit); r.PromptTokensDropped != want || len(r.Steps) != 2 {
		t.Errorf("dropped %d over %d steps, want %d over 2", r.PromptTokensDropped, len(r.Steps), want)
	}
}
