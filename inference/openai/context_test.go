package openai_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/pipeline"
)

// engineServer answers a chat request, and the paths in pages with their
// JSON (404 for the rest); it records the /api/show body.
func engineServer(t *testing.T, pages map[string]string, show *map[string]any) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			_, _ = io.WriteString(w, `{"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}`)
			return
		}
		if r.URL.Path == "/api/show" && show != nil {
			data, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(data, show)
		}
		page, ok := pages[r.Method+" "+r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, page)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// After an endpoint's first chat answer the client learns the model's
// context length where the server publishes it: vLLM's max_model_len in
// /v1/models, Ollama's context_length of the loaded model in /api/ps,
// else its num_ctx parameter in /api/show (no more than the model's own).
func TestLearnContext(t *testing.T) {
	const showInfo = `"model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960}`
	for _, tt := range []struct {
		name  string
		pages map[string]string
		learn bool
		want  int
	}{
		{"vLLM", map[string]string{"GET /v1/models": `{"object": "list", "data": [{"id": "other", "max_model_len": 100}, {"id": "tiny", "max_model_len": 2048}]}`}, true, 2048},
		{"Ollama, loaded", map[string]string{
			"GET /v1/models": `{"object": "list", "data": [{"id": "tiny:latest", "object": "model"}]}`,
			"GET /api/ps":    `{"models": [{"name": "other:latest", "model": "other:latest", "context_length": 8192}, {"name": "tiny:latest", "model": "tiny:latest", "context_length": 4096}]}`,
		}, true, 4096},
		{"Ollama, num_ctx", map[string]string{
			"GET /api/ps":    `{"models": []}`,
			"POST /api/show": `{"parameters": "stop \"<|im_end|>\"\nnum_ctx 512", ` + showInfo + `}`,
		}, true, 512},
		{"Ollama, num_ctx over the model's", map[string]string{
			"POST /api/show": `{"parameters": "num_ctx 100000", ` + showInfo + `}`,
		}, true, 40960},
		{"Ollama, the server's default", map[string]string{
			"POST /api/show": `{"parameters": "temperature 0.6", ` + showInfo + `}`,
		}, true, 0},
		{"hosted API", map[string]string{"GET /v1/models": `{"object": "list", "data": [{"id": "tiny", "object": "model"}]}`}, true, 0},
		{"not asked", map[string]string{"GET /v1/models": `{"data": [{"id": "tiny", "max_model_len": 2048}]}`}, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var show map[string]any
			srv := engineServer(t, tt.pages, &show)
			c, err := openai.NewHTTP(inference.Config{Endpoints: []string{srv.URL + "/v1"}, Model: "tiny", Concurrency: 1, MaxAttempts: 1}, openai.HTTPOptions{LearnContext: tt.learn})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Complete(context.Background(), &inference.Request{Messages: []pipeline.Message{{Role: "user", Content: "q"}}}); err != nil {
				t.Fatal(err)
			}
			if got := c.MaxModelLen(); got != tt.want {
				t.Fatalf("MaxModelLen %d, want %d", got, tt.want)
			}
			if _, ok := tt.pages["POST /api/show"]; ok && show["model"] != "tiny" {
				t.Fatalf("/api/show body %v, want the model named", show)
			}
		})
	}
}
