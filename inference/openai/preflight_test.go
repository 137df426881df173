package openai

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// refusedURL is a base URL where nothing listens.
func refusedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/v1"
}

// modelsServer answers GET /v1/models with status and body, checking the
// key when want is set.
func modelsServer(t *testing.T, status int, body, wantKey string) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if wantKey != "" && r.Header.Get("Authorization") != "Bearer "+wantKey {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":{"message":"Incorrect API key provided"}}`)
			return
		}
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	return s.URL + "/v1"
}

func TestPreflight(t *testing.T) {
	list := `{"object":"list","data":[{"id":"qwen"},{"id":"llama"}]}`
	ollamaList := `{"object":"list","data":[{"id":"tiny:latest"},{"id":"tiny-tools:v2"},{"id":"hf.co/org/m:latest"}]}`
	tests := []struct {
		name     string
		endpoint func(t *testing.T) string
		model    string
		key      string
		want     string // "" for no error; else a part of the message
	}{
		{"ok", func(t *testing.T) string { return modelsServer(t, 200, list, "") }, "qwen", "", ""},
		{"ok with key", func(t *testing.T) string { return modelsServer(t, 200, list, "k1") }, "llama", "k1", ""},
		{"no list to check", func(t *testing.T) string { return modelsServer(t, 200, `{"data":[]}`, "") }, "x", "", ""},
		{"key refused", func(t *testing.T) string { return modelsServer(t, 200, list, "right") }, "qwen", "wrong", "the API key was refused (HTTP 401: Incorrect API key provided)"},
		{"no key sent", func(t *testing.T) string { return modelsServer(t, 200, list, "right") }, "qwen", "", "no API key was sent"},
		{"forbidden", func(t *testing.T) string { return modelsServer(t, 403, `{"message":"nope"}`, "") }, "qwen", "", "HTTP 403"},
		{"model not served", func(t *testing.T) string { return modelsServer(t, 200, list, "") }, "gpt", "", `the model "gpt" (generate.model) is not served; it serves: llama, qwen`},
		// Ollama lists its models with their tags and serves NAME as NAME:latest.
		{"name without its tag", func(t *testing.T) string { return modelsServer(t, 200, ollamaList, "") }, "tiny", "", ""},
		{"name with its tag", func(t *testing.T) string { return modelsServer(t, 200, ollamaList, "") }, "tiny:latest", "", ""},
		{"namespaced name without its tag", func(t *testing.T) string { return modelsServer(t, 200, ollamaList, "") }, "hf.co/org/m", "", ""},
		{"another tag", func(t *testing.T) string { return modelsServer(t, 200, ollamaList, "") }, "tiny:q8", "", `the model "tiny:q8" (generate.model) is not served; it serves: hf.co/org/m:latest, tiny-tools:v2, tiny:latest`},
		{"only another tag served", func(t *testing.T) string { return modelsServer(t, 200, ollamaList, "") }, "tiny-tools", "", `the model "tiny-tools" (generate.model) is not served; it serves: hf.co/org/m:latest, tiny-tools:v2, tiny:latest`},
		{"a tag is not dropped", func(t *testing.T) string { return modelsServer(t, 200, list, "") }, "qwen:latest", "", `the model "qwen:latest" (generate.model) is not served`},
		{"wrong path", func(t *testing.T) string { return strings.TrimSuffix(modelsServer(t, 200, list, ""), "/v1") + "/api" }, "qwen", "", "answered 404"},
		{"server error", func(t *testing.T) string { return modelsServer(t, 503, `{"message":"loading"}`, "") }, "qwen", "", "HTTP 503: loading"},
		{"refused", refusedURL, "qwen", "", "unreachable"},
		// A page where the API should be: validate and run refuse it
		// rather than start a run whose every request fails.
		{"an HTML page", func(t *testing.T) string {
			return modelsServer(t, 200, "<!DOCTYPE html><html><head><title>Sign in</title></head></html>", "")
		}, "qwen", "", `a body that is not JSON (Content-Type "text/html; charset=utf-8", starting "<!DOCTYPE html><html><head><title>Sign in</title></head></ht…")`},
		{"an empty body: nothing to check", func(t *testing.T) string { return modelsServer(t, 200, "", "") }, "qwen", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := inference.Config{Endpoints: []string{tt.endpoint(t)}, Model: tt.model}
			err := Preflight(context.Background(), cfg, HTTPOptions{APIKey: tt.key})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrPreflight) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "generate.endpoints[0]") {
				t.Fatalf("error %v, want ErrPreflight naming generate.endpoints[0] and %q", err, tt.want)
			}
			if tt.key != "" && strings.Contains(err.Error(), tt.key) {
				t.Fatalf("the key appears in %v", err)
			}
		})
	}
}

// TestPreflightEveryEndpoint: every endpoint's problem is reported at once.
func TestPreflightEveryEndpoint(t *testing.T) {
	good := modelsServer(t, 200, `{"data":[{"id":"m"}]}`, "")
	cfg := inference.Config{Endpoints: []string{good, refusedURL(t), modelsServer(t, 200, `{"data":[{"id":"other"}]}`, "")}, Model: "m"}
	err := Preflight(context.Background(), cfg, HTTPOptions{})
	if err == nil || strings.Contains(err.Error(), "endpoints[0]") || !strings.Contains(err.Error(), "endpoints[1]") || !strings.Contains(err.Error(), "endpoints[2]") {
		t.Fatalf("got %v, want endpoints[1] and [2] named", err)
	}
}

// TestBreaker: requests failing for a cause no retry fixes on every
// endpoint open the breaker after BreakAfter attempts, OnBreak is called
// once with an error naming the cause, and later requests fail at once.
func TestBreaker(t *testing.T) {
	tests := []struct {
		name      string
		endpoints func(t *testing.T) []string
		trips     bool
		cause     string
	}{
		{"401 everywhere", func(t *testing.T) []string {
			return []string{statusServer(t, 401).URL, statusServer(t, 401).URL}
		}, true, "HTTP 401"},
		{"404", func(t *testing.T) []string { return []string{statusServer(t, 404).URL} }, true, "HTTP 404"},
		{"refused everywhere", func(t *testing.T) []string { return []string{refusedURL(t), refusedURL(t)} }, true, "connection refused"},
		{"one endpoint of two refused", func(t *testing.T) []string { return []string{refusedURL(t), statusServer(t, 200).URL} }, false, ""},
		{"400 is the request's fault", func(t *testing.T) []string { return []string{statusServer(t, 400).URL} }, false, ""},
		{"500 is retryable", func(t *testing.T) []string { return []string{statusServer(t, 500).URL} }, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(tt.endpoints(t)...)
			cfg.MaxAttempts = 3
			var breaks atomic.Int32
			var brokeWith atomic.Value
			c, err := NewHTTP(cfg, HTTPOptions{Sleep: func(context.Context, time.Duration) error { return nil },
				OnBreak: func(err error) { breaks.Add(1); brokeWith.Store(err.Error()) }})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for range 20 {
				c.Complete(context.Background(), &inference.Request{Messages: []pipeline.Message{{Role: "user", Content: "hi"}}})
			}
			if got := breaks.Load() == 1; got != tt.trips {
				t.Fatalf("breaker opened %d times, want trips=%v", breaks.Load(), tt.trips)
			}
			if !tt.trips {
				return
			}
			if s, _ := brokeWith.Load().(string); !strings.Contains(s, tt.cause) || !strings.Contains(s, "circuit breaker open") {
				t.Fatalf("OnBreak error %q, want it to name %q", s, tt.cause)
			}
			start := time.Now()
			_, err = c.Complete(context.Background(), &inference.Request{Messages: []pipeline.Message{{Role: "user", Content: "hi"}}})
			if !strings.Contains(err.Error(), "circuit breaker open") || time.Since(start) > time.Second {
				t.Fatalf("after the break: %v", err)
			}
		})
	}
}

// statusServer answers every request with status (200: a completion).
func statusServer(t *testing.T, status int) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		if status == 200 {
			io.WriteString(w, okBody)
			return
		}
		io.WriteString(w, `{"error":{"message":"status `+http.StatusText(status)+`"}}`)
	}))
	t.Cleanup(s.Close)
	return s
}
