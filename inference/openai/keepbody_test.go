package openai

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/trajflow/trajflow/inference"
)

// With KeepBody a reply carries its body as sent and its x-request-id;
// without, neither. Request.API sends one request to the other API.
func TestKeepBodyAndRequestAPI(t *testing.T) {
	const chat = `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":2}}}`
	const text = `{"id":"cmpl-1","object":"text_completion","choices":[{"text":" there","finish_reason":"length"}],"usage":{"prompt_tokens":2,"completion_tokens":1}}`
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("X-Request-Id", "req-abc")
		if r.URL.Path == "/v1/completions" {
			io.WriteString(w, text)
			return
		}
		io.WriteString(w, chat)
	})
	path := func(i int) string {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.paths[i]
	}
	kept := newClient(t, testConfig(s.URL+"/v1"), HTTPOptions{KeepBody: true})
	resp, err := kept.Complete(context.Background(), userReq("x"))
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Raw) != chat || resp.RequestID != "req-abc" || resp.CachedPromptTokens != 2 {
		t.Fatalf("raw %s, request id %q, cached %d", resp.Raw, resp.RequestID, resp.CachedPromptTokens)
	}
	req := userReq("ignored")
	req.API, req.Params = "completions", map[string]any{"prompt": "hello"}
	resp, err = kept.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Raw) != text || resp.Message.Content != " there" || path(1) != "/v1/completions" || s.body(1)["prompt"] != "hello" || s.body(1)["messages"] != nil {
		t.Fatalf("completions: raw %s content %q path %s body %v", resp.Raw, resp.Message.Content, path(1), s.body(1))
	}
	plain := newClient(t, testConfig(s.URL+"/v1"), HTTPOptions{})
	resp, err = plain.Complete(context.Background(), userReq("x"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Raw != nil || resp.RequestID != "" {
		t.Fatalf("without KeepBody: raw %s, request id %q", resp.Raw, resp.RequestID)
	}
	cfg := testConfig(s.URL + "/v1")
	cfg.API = "completions"
	req = userReq("q")
	req.API = "chat"
	if _, err := newClient(t, cfg, HTTPOptions{}).Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if path(3) != "/v1/chat/completions" || s.body(3)["messages"] == nil {
		t.Fatalf("a chat row of a completions run went to %s: %v", path(3), s.body(3))
	}
	var _ inference.Client = kept
}
