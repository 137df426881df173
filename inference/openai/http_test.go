package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/internal/leak"
)

// status answers with code and body.
func status(code int, body string) func(w http.ResponseWriter, r *http.Request, n int) {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

// hangup closes the connection without an answer.
func hangup(w http.ResponseWriter, r *http.Request, n int) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

// stall answers after the client gave up.
func stall(w http.ResponseWriter, r *http.Request, n int) { <-r.Context().Done() }

const ctxLenBody = `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`

func TestRetryClasses(t *testing.T) {
	tests := []struct {
		name     string
		handle   func(w http.ResponseWriter, r *http.Request, n int)
		timeout  time.Duration
		class    string // "" = success
		status   int
		attempts int
	}{
		{name: "429 then ok", handle: func(w http.ResponseWriter, r *http.Request, n int) {
			if n < 2 {
				status(429, `{"error":{"message":"slow down"}}`)(w, r, n)
				return
			}
			io.WriteString(w, okBody)
		}, attempts: 3},
		{name: "429 always", handle: status(429, `{"error":{"message":"slow down"}}`), class: inference.ClassRateLimited, status: 429, attempts: 3},
		{name: "500 always", handle: status(500, "boom"), class: inference.ClassServer, status: 500, attempts: 3},
		{name: "503 then ok", handle: func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 0 {
				status(503, "")(w, r, n)
				return
			}
			io.WriteString(w, okBody)
		}, attempts: 2},
		{name: "connection closed", handle: hangup, class: inference.ClassConnection, attempts: 3},
		{name: "per-attempt timeout", handle: stall, timeout: 30 * time.Millisecond, class: inference.ClassTimeout, attempts: 3},
		{name: "unparseable body", handle: status(200, `{"choices":[`), class: inference.ClassBadResponse, status: 200, attempts: 3},
		{name: "408", handle: status(408, "slow"), class: inference.ClassTimeout, status: 408, attempts: 3},
		{name: "404 no retry", handle: status(404, `{"detail":"Not Found"}`), class: inference.ClassHTTP, status: 404, attempts: 1},
		{name: "401 no retry", handle: status(401, `{"error":{"message":"bad key"}}`), class: inference.ClassHTTP, status: 401, attempts: 1},
		{name: "400 no retry", handle: status(400, `{"error":{"message":"temperature must be >= 0"}}`), class: inference.ClassHTTP, status: 400, attempts: 1},
		{name: "context length", handle: status(400, ctxLenBody), class: inference.ClassContextLength, status: 400, attempts: 1},
		{name: "openai context length", handle: status(400, `{"error":{"message":"too long","code":"context_length_exceeded"}}`), class: inference.ClassContextLength, status: 400, attempts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, tt.handle)
			cfg := testConfig(s.URL + "/v1")
			if tt.timeout > 0 {
				cfg.Timeout = pipeline.Duration(tt.timeout)
			}
			c := newClient(t, cfg, HTTPOptions{EjectAfter: 100})
			resp, err := c.Complete(context.Background(), userReq("hi"))
			if got := int(s.calls.Load()); got != tt.attempts {
				t.Errorf("server saw %d attempts, want %d", got, tt.attempts)
			}
			if tt.class == "" {
				if err != nil || resp.Message.Content != "hi" {
					t.Fatalf("resp %+v, err %v", resp, err)
				}
				if st := c.Stats()[0]; st.Retries != int64(tt.attempts-1) || st.Requests != int64(tt.attempts) {
					t.Errorf("stats %+v", st)
				}
				return
			}
			var e *inference.Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v (%T), want *Error", err, err)
			}
			if e.Class != tt.class || e.Status != tt.status {
				t.Errorf("class %s status %d, want %s %d (%v)", e.Class, e.Status, tt.class, tt.status, e)
			}
			// An answer's error names the path requested, not the base
			// URL alone (a 502 of /v1/chat/completions, not of /v1).
			if e.Status != 0 && !strings.Contains(e.Msg, "/v1/chat/completions") {
				t.Errorf("the error %q does not name the path requested", e.Msg)
			}
			if inference.ErrorClass(err) != tt.class {
				t.Errorf("ErrorClass = %s", inference.ErrorClass(err))
			}
			if st := c.Stats()[0]; st.Failures != int64(tt.attempts) {
				t.Errorf("stats %+v, want %d failures", st, tt.attempts)
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newClient(t, testConfig("http://"+addr+"/v1"), HTTPOptions{})
	_, err = c.Complete(context.Background(), userReq("x"))
	if inference.ErrorClass(err) != inference.ClassConnection {
		t.Fatalf("err = %v, want class connection", err)
	}
	if st := c.Stats()[0]; st.Requests != 3 || st.Healthy {
		t.Errorf("stats %+v: want 3 attempts and the endpoint out", st)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Run("seconds, one endpoint", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 0 {
				w.Header().Set("Retry-After", "7")
				w.WriteHeader(429)
				return
			}
			io.WriteString(w, okBody)
		})
		var rec recordSleeps
		c := newClient(t, testConfig(s.URL), HTTPOptions{Sleep: rec.sleep})
		if _, err := c.Complete(context.Background(), userReq("x")); err != nil {
			t.Fatal(err)
		}
		if got := rec.all(); len(got) != 1 || got[0] != 7*time.Second {
			t.Errorf("sleeps %v, want [7s]", got)
		}
		// The wait asked for shows in the endpoint's stats (the progress
		// line shows it) until it is over.
		if w := c.Stats()[0].RetryAfter; w <= 6*time.Second || w > 7*time.Second {
			t.Errorf("Stats RetryAfter %v, want about 7s", w)
		}
	})
	t.Run("http date, capped", func(t *testing.T) {
		now := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Retry-After", now.Add(90*time.Second).Format(http.TimeFormat))
			w.WriteHeader(503)
		})
		var rec recordSleeps
		cfg := testConfig(s.URL)
		cfg.MaxAttempts = 2
		c := newClient(t, cfg, HTTPOptions{Sleep: rec.sleep, Now: func() time.Time { return now }, MaxRetryAfter: 30 * time.Second})
		_, err := c.Complete(context.Background(), userReq("x"))
		if inference.ErrorClass(err) != inference.ClassServer {
			t.Fatalf("err %v", err)
		}
		if got := rec.all(); len(got) != 1 || got[0] != 30*time.Second {
			t.Errorf("sleeps %v, want [30s] (90s capped)", got)
		}
	})
	t.Run("other endpoint does not wait", func(t *testing.T) {
		a := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(429)
		})
		b := newServer(t, nil)
		var rec recordSleeps
		c := newClient(t, testConfig(a.URL, b.URL), HTTPOptions{Sleep: rec.sleep})
		// The first request goes to a (round robin starts there), is
		// refused, and is retried on b after the plain backoff.
		resp, err := c.Complete(context.Background(), userReq("x"))
		if err != nil {
			t.Fatal(err)
		}
		if a.calls.Load() != 1 || b.calls.Load() != 1 || resp.Endpoint != strings.TrimSuffix(b.URL, "/")+"/v1" {
			t.Errorf("a %d b %d endpoint %s", a.calls.Load(), b.calls.Load(), resp.Endpoint)
		}
		if got := rec.all(); len(got) != 1 || got[0] > 5*time.Millisecond {
			t.Errorf("sleeps %v, want one backoff <= 5ms", got)
		}
		// a is cooling down: the next requests go to b.
		for i := 0; i < 3; i++ {
			if _, err := c.Complete(context.Background(), userReq("x")); err != nil {
				t.Fatal(err)
			}
		}
		if a.calls.Load() != 1 {
			t.Errorf("a got %d calls while cooling down", a.calls.Load())
		}
	})
	t.Run("backoff grows and stays within bounds", func(t *testing.T) {
		s := newServer(t, status(500, ""))
		var rec recordSleeps
		cfg := testConfig(s.URL)
		cfg.MaxAttempts = 8
		cfg.BackoffBase = pipeline.Duration(10 * time.Millisecond)
		cfg.BackoffMax = pipeline.Duration(40 * time.Millisecond)
		c := newClient(t, cfg, HTTPOptions{Sleep: rec.sleep, EjectAfter: 100})
		c.Complete(context.Background(), userReq("x"))
		got := rec.all()
		if len(got) != 7 {
			t.Fatalf("sleeps %v, want 7", got)
		}
		caps := []time.Duration{10, 20, 40, 40, 40, 40, 40}
		for i, d := range got {
			if d < 0 || d > caps[i]*time.Millisecond {
				t.Errorf("sleep %d = %s, want in [0, %dms]", i, d, caps[i])
			}
		}
	})
}

func TestDeadline(t *testing.T) {
	s := newServer(t, stall)
	cfg := testConfig(s.URL)
	cfg.Deadline = pipeline.Duration(50 * time.Millisecond)
	cfg.MaxAttempts = 100
	c := newClient(t, cfg, HTTPOptions{})
	_, err := c.Complete(context.Background(), userReq("x"))
	var e *inference.Error
	if !errors.As(err, &e) || e.Class != inference.ClassTimeout || !strings.Contains(e.Msg, "generate.deadline") {
		t.Fatalf("err = %v, want a timeout naming generate.deadline", err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
	if st := c.Stats()[0]; !st.Healthy || st.Failures != 0 || st.InFlight != 0 {
		t.Errorf("the caller's deadline counted against the endpoint: %+v", st)
	}
}

func TestCancelAbortsRequest(t *testing.T) {
	t.Cleanup(leak.Check(t))
	started := make(chan struct{})
	closed := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		close(started)
		<-r.Context().Done() // the server sees the connection close
		close(closed)
	})
	c := newClient(t, testConfig(s.URL), HTTPOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Complete(ctx, userReq("x"))
		errc <- err
	}()
	<-started
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) || inference.ErrorClass(err) != inference.ClassCancelled {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Complete did not return after cancel")
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("server never saw the request end")
	}
	if n := s.calls.Load(); n != 1 {
		t.Errorf("%d attempts after cancel, want 1", n)
	}
}

func TestNewHTTPErrors(t *testing.T) {
	good := testConfig("http://127.0.0.1:1/v1")
	tests := []struct {
		name   string
		mutate func(*inference.Config)
		want   []string
	}{
		{"sim endpoint", func(c *inference.Config) { c.Endpoints = []string{"sim://"} }, []string{"generate.endpoints[0]", "simulator"}},
		{"bad scheme", func(c *inference.Config) { c.Endpoints = []string{"http://a/v1", "ftp://x"} }, []string{"generate.endpoints[1]"}},
		{"no host", func(c *inference.Config) { c.Endpoints = []string{"http:///v1"} }, []string{"generate.endpoints[0]", "no host"}},
		{"duplicate", func(c *inference.Config) { c.Endpoints = []string{"http://a:1", "http://a:1/v1/"} }, []string{"generate.endpoints[1]", "repeats generate.endpoints[0]"}},
		{"none", func(c *inference.Config) { c.Endpoints = nil }, []string{"generate.endpoints:"}},
		{"api", func(c *inference.Config) { c.API = "responses" }, []string{"generate.api"}},
		{"several at once", func(c *inference.Config) { c.Concurrency = 0; c.MaxAttempts = 0; c.Model = "" },
			[]string{"generate.concurrency", "generate.max_attempts", "generate.model"}},
		{"backoff", func(c *inference.Config) { c.BackoffMax = pipeline.Duration(time.Microsecond) }, []string{"generate.backoff_max"}},
		{"stream", func(c *inference.Config) { c.Params = map[string]any{"stream": true} }, []string{"generate.params.stream"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.mutate(&cfg)
			c, err := NewHTTP(cfg, HTTPOptions{})
			if err == nil {
				c.Close()
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestNormaliseEndpoint(t *testing.T) {
	tests := []struct{ in, base, root, name string }{
		{"http://h:8000", "http://h:8000/v1", "http://h:8000", "http://h:8000/v1"},
		{"http://h:8000/", "http://h:8000/v1", "http://h:8000", "http://h:8000/v1"},
		{"http://h:8000/v1/", "http://h:8000/v1", "http://h:8000", "http://h:8000/v1"},
		{"https://api.example.com/openai/v1", "https://api.example.com/openai/v1", "https://api.example.com", "https://api.example.com/openai/v1"},
		{"http://u:pw@h/v1", "http://u:pw@h/v1", "http://u:pw@h", "http://[REDACTED]@h/v1"},
		// A token given as the user name is the whole secret.
		{"https://sk-TOKEN@h/v1", "https://sk-TOKEN@h/v1", "https://sk-TOKEN@h", "https://[REDACTED]@h/v1"},
	}
	for _, tt := range tests {
		base, root, name, err := normaliseEndpoint(tt.in)
		if err != nil || base != tt.base || root != tt.root || name != tt.name {
			t.Errorf("%s: got %s %s %s %v", tt.in, base, root, name, err)
		}
	}
}

func TestAPIKeyNeverInErrorsOrLogs(t *testing.T) {
	const key = "sk-very-secret-key"
	echo := func(w http.ResponseWriter, r *http.Request, n int) {
		code := 401
		if n == 0 {
			code = 500
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":{"message":"got header %s"}}`, r.Header.Get("Authorization"))
	}
	s := newServer(t, echo)
	var mu sync.Mutex
	var logs []string
	logf := func(f string, a ...any) { mu.Lock(); logs = append(logs, fmt.Sprintf(f, a...)); mu.Unlock() }
	c := newClient(t, testConfig(s.URL), HTTPOptions{APIKey: key, Logf: logf})
	_, err := c.Complete(context.Background(), userReq("x"))
	if inference.ErrorClass(err) != inference.ClassHTTP {
		t.Fatalf("err %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logs) == 0 {
		t.Fatal("the retry was not logged")
	}
	for _, text := range append(logs, err.Error()) {
		if strings.Contains(text, key) {
			t.Errorf("key leaked: %s", text)
		}
	}
}

func TestCloseStopsUse(t *testing.T) {
	t.Cleanup(leak.Check(t))
	s := newServer(t, nil)
	c, err := NewHTTP(testConfig(s.URL), HTTPOptions{ProbeInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(context.Background(), userReq("x")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close() // idempotent
	if _, err := c.Complete(context.Background(), userReq("x")); err == nil {
		t.Error("Complete after Close succeeded")
	}
}

// A redirect is reported as one, naming where it points (its user info
// redacted), by the request and by the preflight alike: never followed
// into a misleading 404.
func TestRedirectReported(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://tok@new.example.com"+r.URL.Path, http.StatusFound)
	}))
	defer srv.Close()
	cfg := inference.Config{Endpoints: []string{srv.URL + "/v1"}, Model: "m", Concurrency: 1, MaxAttempts: 1}
	c, err := NewHTTP(cfg, HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Complete(context.Background(), &inference.Request{Messages: []pipeline.Message{{Role: "user", Content: "q"}}})
	var e *inference.Error
	if !errors.As(err, &e) || e.Status != http.StatusFound || !strings.Contains(e.Msg, "redirects (HTTP 302) to https://[REDACTED]@new.example.com/v1/chat/completions") || strings.Contains(e.Msg, "tok@") {
		t.Fatalf("err %v", err)
	}
	err = Preflight(context.Background(), cfg, HTTPOptions{})
	if err == nil || !strings.Contains(err.Error(), "redirects (HTTP 302) to https://[REDACTED]@new.example.com/v1/models") {
		t.Fatalf("preflight %v", err)
	}
}

// A body over MaxResponseBytes is refused: by its Content-Length before it
// is read, and without one once the limit is passed (an endless body
// included), never buffered whole.
func TestResponseLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
		want string
	}{
		{"content-length", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "5000")
			w.Write(bytes.Repeat([]byte(" "), 5000))
		}, "response body of 5000 bytes, over 1024"},
		{"chunked", func(w http.ResponseWriter, r *http.Request) {
			w.(http.Flusher).Flush()
			w.Write(bytes.Repeat([]byte(" "), 5000))
		}, "response body over 1024 bytes"},
		{"endless", func(w http.ResponseWriter, r *http.Request) {
			chunk := bytes.Repeat([]byte(" "), 1<<16)
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}, "response body over 1024 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.h)
			defer srv.Close()
			c, err := NewHTTP(inference.Config{Endpoints: []string{srv.URL + "/v1"}, Model: "m", Concurrency: 1, MaxAttempts: 1}, HTTPOptions{MaxResponseBytes: 1024})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Complete(context.Background(), &inference.Request{Messages: []pipeline.Message{{Role: "user", Content: "q"}}})
			if inference.ErrorClass(err) != inference.ClassBadResponse || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v", err)
			}
		})
	}
}
