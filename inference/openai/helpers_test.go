package openai

import (
	"context"
	"encoding/json"
	"github.com/trajflow/trajflow/inference"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// okBody is a minimal chat completion.
const okBody = `{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`

// server is a test inference server: a handler per call, with a record of
// every request it saw and the most requests it had in flight at once.
type server struct {
	*httptest.Server
	mu       sync.Mutex
	bodies   []map[string]any
	headers  []http.Header
	paths    []string
	calls    atomic.Int64
	cur, max atomic.Int64
	// handle answers call n (0-based); nil answers okBody.
	handle func(w http.ResponseWriter, r *http.Request, n int)
	// health answers GET probes; nil answers 200.
	health func(w http.ResponseWriter, r *http.Request)
}

func newServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) *server {
	t.Helper()
	s := &server{handle: handle}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		s.mu.Lock()
		h := s.health
		s.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		io.WriteString(w, `{"data":[]}`)
		return
	}
	cur := s.cur.Add(1)
	defer s.cur.Add(-1)
	for {
		m := s.max.Load()
		if cur <= m || s.max.CompareAndSwap(m, cur) {
			break
		}
	}
	data, _ := io.ReadAll(r.Body)
	var body map[string]any
	json.Unmarshal(data, &body)
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	s.headers = append(s.headers, r.Header.Clone())
	s.paths = append(s.paths, r.URL.Path)
	h := s.handle
	s.mu.Unlock()
	n := int(s.calls.Add(1)) - 1
	if h == nil {
		io.WriteString(w, okBody)
		return
	}
	h(w, r, n)
}

func (s *server) setHandle(h func(w http.ResponseWriter, r *http.Request, n int)) {
	s.mu.Lock()
	s.handle = h
	s.mu.Unlock()
}

func (s *server) setHealth(h func(w http.ResponseWriter, r *http.Request)) {
	s.mu.Lock()
	s.health = h
	s.mu.Unlock()
}

func (s *server) body(i int) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[i]
}

// testConfig is a generate section with fast retries.
func testConfig(endpoints ...string) inference.Config {
	return inference.Config{
		Endpoints:   endpoints,
		Model:       "test-model",
		API:         "chat",
		Concurrency: 16,
		MaxAttempts: 3,
		Timeout:     pipeline.Duration(10 * time.Second),
		BackoffBase: pipeline.Duration(time.Millisecond),
		BackoffMax:  pipeline.Duration(5 * time.Millisecond),
	}
}

func newClient(t *testing.T, cfg inference.Config, opts HTTPOptions) *HTTPClient {
	t.Helper()
	c, err := NewHTTP(cfg, opts)
	if err != nil {
		t.Fatalf("NewHTTP: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func userReq(text string) *inference.Request {
	return &inference.Request{Messages: []pipeline.Message{{Role: "user", Content: text}}}
}

// waitFor polls cond until it holds or fails t after a generous bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// recordSleeps replaces the backoff sleep: it records each wait and returns
// at once (honouring ctx).
type recordSleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (r *recordSleeps) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.d = append(r.d, d)
	r.mu.Unlock()
	return ctx.Err()
}

func (r *recordSleeps) all() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.d...)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
