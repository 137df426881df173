package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/internal/leak"
	"github.com/trajflow/trajflow/runner"
)

// bodies records the request bodies a server received, by path.
type bodies struct {
	h  http.Handler
	mu sync.Mutex
	// got are "PATH BODY" lines in arrival order.
	got []string
}

func (b *bodies) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if r.Method == http.MethodPost {
		b.mu.Lock()
		b.got = append(b.got, r.URL.Path+" "+string(body))
		b.mu.Unlock()
	}
	b.h.ServeHTTP(w, r)
}

// jsonReplies answers each completion request with a JSON object holding
// the simulator's text, so that the structured-output check passes it
// (a /completions body carries no response_format: the check is the
// client's).
func jsonReplies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !strings.HasSuffix(r.URL.Path, "/completions") {
			h.ServeHTTP(w, r)
			return
		}
		got := httptest.NewRecorder()
		h.ServeHTTP(got, r)
		out := got.Body.Bytes()
		var resp struct {
			Choices []map[string]any `json:"choices"`
		}
		var whole map[string]any
		if json.Unmarshal(out, &resp) == nil && json.Unmarshal(out, &whole) == nil && len(resp.Choices) > 0 {
			for _, c := range resp.Choices {
				if text, ok := c["text"].(string); ok {
					b, _ := json.Marshal(map[string]string{"answer": text})
					c["text"] = string(b)
				}
			}
			whole["choices"] = resp.Choices
			out, _ = json.Marshal(whole)
		}
		for k, v := range got.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(got.Code)
		w.Write(out)
	})
}

// take returns the bodies received since the last take.
func (b *bodies) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	got := b.got
	b.got = nil
	return got
}

// TestValidateSendsWhatRunSends: with two routes of their own
// max_seq_len and generate.api tokens, the first requests trajflow
// validate sends (--send) are byte for byte those the run sends: the
// same /tokenize bodies, and the same token-id prompts on /completions
// with max_tokens capped to the room each row's route leaves. The
// client's decorators change none of it: with generate.cache,
// generate.rate_limit and a structured-output schema
// (params.response_format json_schema) validate walks the same build
// steps and sends the same bytes, and writes nothing to the cache.
func TestValidateSendsWhatRunSends(t *testing.T) {
	for _, tt := range []struct {
		name string
		sets []string
		// decorated adds generate.cache (validate must leave it empty) and
		// a server whose replies are JSON objects.
		decorated bool
	}{
		{name: "routes"},
		{
			name: "decorated",
			sets: []string{
				"generate.rate_limit.requests_per_minute=6000",
				"generate.params.response_format={type: json_schema, json_schema: {name: answer, schema: {type: object}}}",
			},
			decorated: true,
		},
	} {
		t.Run(tt.name, func(t *testing.T) { validateSendsWhatRunSends(t, tt.sets, tt.decorated) })
	}
}

func validateSendsWhatRunSends(t *testing.T, sets []string, decorated bool) {
	defer leak.Check(t)()
	s := sim.New(sim.Options{Seed: 5, Model: "sim"})
	defer s.Close()
	rec := &bodies{h: s.Handler()}
	if decorated {
		rec.h = jsonReplies(rec.h)
	}
	srv := httptest.NewServer(rec)
	defer srv.Close()

	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	if decorated {
		sets = append(sets, "generate.cache="+cache)
	}
	tasks := filepath.Join(dir, "tasks.jsonl")
	var rows strings.Builder
	for i, route := range []string{"short", "long", "short", "long"} {
		json.NewEncoder(&rows).Encode(map[string]any{
			"question": []string{"1+1", "2+3", "4+4", "5+7"}[i], "expected_answer": []string{"2", "5", "8", "12"}[i],
			"agent_ref": map[string]any{"name": route},
		})
	}
	if err := os.WriteFile(tasks, []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	const env = `  route_field: agent_ref.name
  routes:
    short: {name: math, answer_field: expected_answer, max_seq_len: 100}
    long: {name: math, answer_field: expected_answer, max_seq_len: 400}
`
	limits := map[string]int{"short": 100, "long": 400}
	cfg := routedConfig(t, tasks, env, append([]string{
		"generate.endpoints=[" + srv.URL + "/v1]", "generate.api=tokens", "generate.params.max_tokens=1000"}, sets...)...)

	var out bytes.Buffer
	if err := runner.Validate(context.Background(), cfg, runner.ValidateOptions{Rows: 4, Send: true, Out: &out}); err != nil {
		t.Fatalf("Validate: %v\n%s", err, &out)
	}
	validated := rec.take()
	if decorated {
		if entries, _ := os.ReadDir(cache); len(entries) > 0 {
			t.Errorf("validate wrote %d entries into generate.cache %s", len(entries), cache)
		}
	}
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	ran := map[string]bool{}
	for _, b := range rec.take() {
		ran[b] = true
	}

	// Validate's requests: /tokenize of each row's prompt, then its
	// token-id prompt on /completions (after the start-up check's).
	// /detokenize only shows the rendered prompt to the user: it sends
	// nothing the run would generate from.
	var prompts []map[string]any
	tokenized := 0
	for _, b := range validated {
		path, body, _ := strings.Cut(b, " ")
		switch {
		case strings.HasSuffix(path, "/detokenize"):
			continue
		case strings.HasSuffix(path, "/tokenize"):
			tokenized++
		case strings.HasSuffix(path, "/completions"):
			var req map[string]any
			if err := json.Unmarshal([]byte(body), &req); err != nil {
				t.Fatal(err)
			}
			if req["max_tokens"] == float64(1) {
				continue // the start-up check's one-token request
			}
			prompts = append(prompts, req)
		}
		if !ran[b] {
			t.Errorf("validate sent a request the run did not send:\n%s", b)
		}
	}
	if len(prompts) != 4 || tokenized < 4 {
		t.Fatalf("validate sent %d first requests and %d /tokenize requests, want 4 and at least 4:\n%s", len(prompts), tokenized, strings.Join(validated, "\n"))
	}
	// Each row's max_tokens is the room its own route's max_seq_len
	// leaves after the prompt: the routes' limits, not env.max_seq_len.
	for i, req := range prompts {
		route := []string{"short", "long", "short", "long"}[i]
		ids, _ := req["prompt"].([]any)
		if want := float64(limits[route] - len(ids)); req["max_tokens"] != want {
			t.Errorf("row %d (route %s): max_tokens %v, want %v (max_seq_len %d less %d prompt ids)", i, route, req["max_tokens"], want, limits[route], len(ids))
		}
	}
	if !strings.Contains(out.String(), "sent: ") {
		t.Errorf("the report does not say what the server answered:\n%s", &out)
	}
}
