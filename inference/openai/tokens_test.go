package openai_test

import (
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
	"github.com/trajflow/trajflow/pipeline"
)

// TestTokensAPI checks the wire shape of api: tokens: POST /tokenize at
// the server's root with messages, and token-id prompts on
// /v1/completions with return_token_ids and logprobs.
func TestTokensAPI(t *testing.T) {
	var mu sync.Mutex
	bodies := map[string]map[string]any{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(data, &body)
		mu.Lock()
		bodies[r.URL.Path] = body
		mu.Unlock()
		switch r.URL.Path {
		case "/tokenize":
			_, _ = io.WriteString(w, `{"count": 3, "max_model_len": 100, "tokens": [1, 2, 3], "token_strs": null}`)
		case "/v1/completions":
			_, _ = io.WriteString(w, `{"choices": [{"text": "hi", "token_ids": [7, 8], "finish_reason": "stop", "logprobs": {"token_logprobs": [-0.5, -0.25]}}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := openai.NewHTTP(inference.Config{Endpoints: []string{srv.URL + "/v1"}, Model: "m", API: "tokens", Concurrency: 1, MaxAttempts: 1}, openai.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if n := c.MaxModelLen(); n != 0 {
		t.Fatalf("MaxModelLen %d before any /tokenize answer", n)
	}
	ids, err := c.Tokenize(ctx, &inference.TokenizeRequest{Messages: []pipeline.Message{{Role: "user", Content: "q"}}, AddGenerationPrompt: true})
	if err != nil || !slices.Equal(ids, []int32{1, 2, 3}) {
		t.Fatalf("Tokenize = %v, %v", ids, err)
	}
	if n := c.MaxModelLen(); n != 100 {
		t.Fatalf("MaxModelLen %d, the server said 100", n)
	}
	if b := bodies["/tokenize"]; b["model"] != "m" || b["add_generation_prompt"] != true || b["add_special_tokens"] != false {
		t.Errorf("tokenize body %v", b)
	}
	resp, err := c.Complete(ctx, &inference.Request{PromptTokenIDs: ids, Params: map[string]any{"max_completion_tokens": 5, "tools": []any{"x"}}, Tools: []json.RawMessage{[]byte(`{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "hi" || !slices.Equal(resp.Message.TokenIDs, []int32{7, 8}) || !slices.Equal(resp.Message.Logprobs, []float32{-0.5, -0.25}) {
		t.Errorf("response %+v", resp.Message)
	}
	b := bodies["/v1/completions"]
	if b["return_token_ids"] != true || b["logprobs"] != 1.0 || b["max_tokens"] != 5.0 || b["tools"] != nil || b["messages"] != nil {
		t.Errorf("completions body %v", b)
	}
	if p, _ := b["prompt"].([]any); len(p) != 3 {
		t.Errorf("prompt %v, want the ids", b["prompt"])
	}
}

// TestTokenizeMissing checks that a server without /tokenize fails with a
// message that names the endpoint and says to use api: chat.
func TestTokenizeMissing(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	c, err := openai.NewHTTP(inference.Config{Endpoints: []string{srv.URL + "/v1"}, Model: "m", API: "tokens", Concurrency: 1, MaxAttempts: 3}, openai.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Tokenize(context.Background(), &inference.TokenizeRequest{Messages: []pipeline.Message{{Role: "user", Content: "q"}}})
	if err == nil || !strings.Contains(err.Error(), "/tokenize") || !strings.Contains(err.Error(), "generate.api: chat") || !strings.Contains(err.Error(), strings.TrimPrefix(srv.URL, "http://")) {
		t.Fatalf("err = %v", err)
	}
}

// An error names the URL the request went to: /tokenize and /detokenize
// at the server's root (as vLLM serves them), the OpenAI paths under the
// base URL.
func TestErrorNamesRequestedURL(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "completions") {
			http.Error(w, `{"error": {"message": "no such model"}}`, http.StatusBadRequest)
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	c, err := openai.NewHTTP(inference.Config{Endpoints: []string{srv.URL + "/v1"}, Model: "m", API: "tokens", Concurrency: 1, MaxAttempts: 1}, openai.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, tt := range []struct {
		name      string
		call      func() error
		want, not string
	}{
		{"tokenize", func() error {
			_, err := c.Tokenize(ctx, &inference.TokenizeRequest{Messages: []pipeline.Message{{Role: "user", Content: "q"}}})
			return err
		}, srv.URL + "/tokenize: ", "/v1/tokenize"},
		{"detokenize", func() error { _, err := c.Detokenize(ctx, "", []int32{1}); return err }, srv.URL + "/detokenize: ", "/v1/detokenize"},
		{"chat", func() error {
			_, err := c.Complete(ctx, &inference.Request{API: inference.APIChat, Messages: []pipeline.Message{{Role: "user", Content: "q"}}})
			return err
		}, srv.URL + "/v1/chat/completions: ", "/v1/v1"},
		{"token-id prompt", func() error { _, err := c.Complete(ctx, &inference.Request{PromptTokenIDs: []int32{1}}); return err }, srv.URL + "/v1/completions: ", "/v1/v1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), tt.not) {
				t.Fatalf("error %q: want it to name %q (and not %q)", err, tt.want, tt.not)
			}
		})
	}
}
