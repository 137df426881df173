package generate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/generate"
)

// cutServer is a chat server like Ollama: no token ids, a prompt is as
// many tokens as its messages have words, and a prompt over its context
// is cut to it silently (prompt_tokens = the context). ctx is the context
// it publishes (MaxModelLen; 0: none).
type cutServer struct {
	ctx, window int
}

func (s *cutServer) MaxModelLen() int { return s.ctx }

func (s *cutServer) Complete(_ context.Context, req *inference.Request) (*inference.Response, error) {
	prompt := 0
	for _, m := range req.Messages {
		prompt += len(strings.Fields(m.Content))
	}
	return &inference.Response{Message: pipeline.Message{Role: pipeline.RoleAssistant, Content: "w w w w w"}, FinishReason: "stop",
		PromptTokens: min(prompt, s.window), CompletionTokens: 5, Endpoint: "http://ollama:11434/v1"}, nil
}

// A prompt the server cut to its context (usage.prompt_tokens at the
// context length it publishes, the prompt longer) is context_length: an
// error row on the first turn, a truncated end on a later one; a prompt
// that fits, or a context the server does not publish, is not.
func TestSilentCut(t *testing.T) {
	// Words are 6 bytes ("alpha "): the estimate (4 bytes a token) is
	// above the count, as it is for a prompt whose text is long.
	for _, tt := range []struct {
		name       string
		ctx        int
		first, obs int // words of the first prompt and of the observation
		turns      int
		status     pipeline.Status
		class      string
		truncated  bool
		finish     string
		discarded  float64
	}{
		{"first prompt cut", 512, 2009, 0, 0, pipeline.StatusError, inference.ClassContextLength, false, "", 1},
		{"later prompt cut", 512, 300, 400, 1, pipeline.StatusOK, "", true, generate.FinishContextLength, 1},
		{"fits", 512, 300, 100, 2, pipeline.StatusPending, "", false, "stop", 0},
		{"context unknown", 0, 2009, 0, 1, pipeline.StatusPending, "", false, "stop", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g, err := generate.New(&cutServer{ctx: tt.ctx, window: 512}, generate.Options{Model: "tiny", API: "chat"})
			if err != nil {
				t.Fatal(err)
			}
			task := &pipeline.Task{Index: 2, Messages: []pipeline.Message{{Role: pipeline.RoleUser, Content: strings.Repeat("alpha ", tt.first)}}}
			r := &pipeline.Rollout{Task: task, GroupSize: 1, Seed: 1, Messages: slices.Clone(task.Messages)}
			for turn := 1; turn <= 2 && r.Status == pipeline.StatusPending; turn++ {
				if turn > 1 {
					if tt.obs == 0 {
						break
					}
					r.Messages = append(r.Messages, pipeline.Message{Role: pipeline.RoleUser, Content: strings.Repeat("beta ", tt.obs), Turn: 1})
				}
				if err := g.Turn(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			if r.Status != tt.status || r.ErrorClass != tt.class || r.Truncated != tt.truncated || r.NumTurns != tt.turns ||
				r.FinishReason != tt.finish || r.Metrics[pipeline.MetricDiscardedReplies] != tt.discarded {
				t.Fatalf("status %q class %q truncated %v turns %d finish %q discarded %v (error %q); want %q %q %v %d %q %v",
					r.Status, r.ErrorClass, r.Truncated, r.NumTurns, r.FinishReason, r.Metrics[pipeline.MetricDiscardedReplies], r.Error,
					tt.status, tt.class, tt.truncated, tt.turns, tt.finish, tt.discarded)
			}
			if tt.class != "" && !strings.Contains(r.Error, "usage.prompt_tokens 512, its whole context (512 tokens)") {
				t.Fatalf("error %q does not say what the server did", r.Error)
			}
		})
	}
}

// Against an Ollama-shaped server (HTTP 200 for a prompt over its
// context, prompt_tokens = the context; the loaded model's context in
// /api/ps) the HTTP client learns the context after the first answer and
// the first prompt's silent cut is a context_length error row.
func TestOllamaSilentCutHTTP(t *testing.T) {
	const window = 512
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/chat/completions":
			var body struct {
				Messages []struct {
					Content string `json:"content"`
				} `json:"messages"`
			}
			data, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(data, &body)
			n := 0
			for _, m := range body.Messages {
				n += len(strings.Fields(m.Content))
			}
			_, _ = fmt.Fprintf(w, `{"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": %d, "completion_tokens": 1}}`, min(n, window))
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object": "list", "data": [{"id": "tiny:latest", "object": "model", "owned_by": "library"}]}`)
		case "/api/ps":
			_, _ = fmt.Fprintf(w, `{"models": [{"name": "tiny:latest", "model": "tiny:latest", "context_length": %d}]}`, window)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := openai.NewHTTP(inference.Config{Endpoints: []string{srv.URL + "/v1"}, Model: "tiny", API: "chat", Concurrency: 1, MaxAttempts: 1}, openai.HTTPOptions{LearnContext: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := generate.New(c, generate.Options{Model: "tiny", API: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		words int
		class string
	}{{2009, inference.ClassContextLength}, {100, ""}} {
		task := &pipeline.Task{Messages: []pipeline.Message{{Role: pipeline.RoleUser, Content: strings.Repeat("alpha ", tt.words)}}}
		r := &pipeline.Rollout{Task: task, GroupSize: 1, Seed: 1, Messages: slices.Clone(task.Messages)}
		if err := g.Turn(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if r.ErrorClass != tt.class {
			t.Fatalf("a prompt of %d tokens under a context of %d: class %q (%s), want %q", tt.words, window, r.ErrorClass, r.Error, tt.class)
		}
	}
}
