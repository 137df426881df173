package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trajflow/trajflow/serve/client"
)

// fastRetry retries quickly, for tests.
var fastRetry = client.Retry{Initial: time.Millisecond, Max: 5 * time.Millisecond, Deadline: 10 * time.Second}

// scripted is a service answering each request with the next of its
// answers (the last one repeated), counting the requests.
type scripted struct {
	mu      sync.Mutex
	answers []func(http.ResponseWriter)
	calls   int
	headers []http.Header
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	i := min(s.calls, len(s.answers)-1)
	s.calls++
	s.headers = append(s.headers, r.Header.Clone())
	s.mu.Unlock()
	s.answers[i](w)
}

func errorAnswer(code int, param, reason string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "scripted", "parameter": param, "reason": reason})
	}
}

func okAnswer(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"step": 1, "acked": true}`))
}

// cutAnswer is a step's answer whose body breaks off: the headers promise
// a JSONL body of 2 rows, the connection closes after one line.
func cutAnswer(w http.ResponseWriter) {
	h := w.Header()
	h.Set(client.HeaderStep, "7")
	h.Set(client.HeaderRows, "2")
	h.Set(client.HeaderGroups, "1")
	h.Set("Content-Length", "100")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"row": 1}` + "\n"))
	panic(http.ErrAbortHandler)
}

func stepAnswer(w http.ResponseWriter) {
	h := w.Header()
	h.Set(client.HeaderStep, "7")
	h.Set(client.HeaderRows, "2")
	h.Set(client.HeaderGroups, "1")
	h.Set(client.HeaderVersions, "0")
	_, _ = w.Write([]byte("{\"row\": 1}\n{\"row\": 2}\n"))
}

// TestRetry: the errors a restart of the service gives (502, 503 but the
// input's end, 504, a body cut short) are retried until the call
// succeeds; the others are not; Retry.Deadline bounds the retries and a
// negative one turns them off.
func TestRetry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers []func(http.ResponseWriter)
		retry   client.Retry
		next    bool // GET /v1/steps/next instead of an ack
		calls   int
		status  int // the error's status; 0: success
	}{
		{"503 stopping, then ok", []func(http.ResponseWriter){errorAnswer(503, "", client.ReasonStopping), okAnswer}, fastRetry, false, 2, 0},
		{"503 without a reason (a proxy), then ok", []func(http.ResponseWriter){errorAnswer(503, "", ""), okAnswer}, fastRetry, false, 2, 0},
		{"502 and 504, then ok", []func(http.ResponseWriter){errorAnswer(502, "", ""), errorAnswer(504, "", ""), okAnswer}, fastRetry, false, 3, 0},
		{"503 ended: not retried", []func(http.ResponseWriter){errorAnswer(503, "", client.ReasonEnded), okAnswer}, fastRetry, false, 1, 503},
		{"404: not retried", []func(http.ResponseWriter){errorAnswer(404, "step", ""), okAnswer}, fastRetry, false, 1, 404},
		{"400: not retried", []func(http.ResponseWriter){errorAnswer(400, "groups", ""), okAnswer}, fastRetry, true, 1, 400},
		{"500: not retried", []func(http.ResponseWriter){errorAnswer(500, "", client.ReasonInternal), okAnswer}, fastRetry, false, 1, 500},
		{"retries off", []func(http.ResponseWriter){errorAnswer(503, "", client.ReasonStopping), okAnswer}, client.Retry{Deadline: -1}, false, 1, 503},
		{"a step cut short, then whole", []func(http.ResponseWriter){cutAnswer, stepAnswer}, fastRetry, true, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scripted{answers: tc.answers}
			srv := httptest.NewServer(s)
			defer srv.Close()
			c := client.New(srv.URL, "")
			c.Retry = tc.retry
			var err error
			if tc.next {
				var st *client.Step
				st, err = c.Next(context.Background(), 1, client.FormatJSONL)
				if err == nil && (st.Number != 7 || strings.Count(string(st.Body), "\n") != 2) {
					t.Fatalf("step %d, body %q", st.Number, st.Body)
				}
			} else {
				err = c.Ack(context.Background(), 1)
			}
			var ce *client.Error
			switch {
			case tc.status == 0 && err != nil:
				t.Fatalf("%v, want success", err)
			case tc.status != 0 && (!errors.As(err, &ce) || ce.Status != tc.status):
				t.Fatalf("%v, want a %d", err, tc.status)
			}
			if s.calls != tc.calls {
				t.Fatalf("%d calls, want %d", s.calls, tc.calls)
			}
		})
	}
}

// TestRetryDeadline: a service that stays down fails the call once
// Retry.Deadline has passed, with the last error, having told OnRetry of
// each retry.
func TestRetryDeadline(t *testing.T) {
	s := &scripted{answers: []func(http.ResponseWriter){errorAnswer(503, "", client.ReasonStopping)}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := client.New(srv.URL, "")
	var retries atomic.Int64
	c.Retry = client.Retry{Initial: time.Millisecond, Max: 2 * time.Millisecond, Deadline: 50 * time.Millisecond,
		OnRetry: func(error, time.Duration) { retries.Add(1) }}
	err := c.Ack(context.Background(), 1)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 503 || !strings.Contains(err.Error(), "Retry.Deadline") {
		t.Fatalf("%v, want the 503 after the deadline", err)
	}
	if n := retries.Load(); n < 2 || int(n) != s.calls-1 {
		t.Fatalf("%d retries heard, %d calls", n, s.calls)
	}
}

// TestRetryContext: a call's context ends its retries.
func TestRetryContext(t *testing.T) {
	s := &scripted{answers: []func(http.ResponseWriter){errorAnswer(503, "", client.ReasonStopping)}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := client.New(srv.URL, "")
	c.Retry = client.Retry{Initial: time.Hour, Max: time.Hour, Deadline: 10 * time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	c.Retry.OnRetry = func(error, time.Duration) { cancel() }
	if err := c.Ack(ctx, 1); err == nil {
		t.Fatal("a cancelled call succeeded")
	}
	if s.calls != 1 {
		t.Fatalf("%d calls after the cancel", s.calls)
	}
}

// TestRetryConnectionRefused: a call made while nothing listens (the
// service restarting) goes on once the service listens again on the same
// address.
func TestRetryConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // down: connection refused
	c := client.New("http://"+addr, "")
	c.Retry = client.Retry{Initial: time.Millisecond, Max: 10 * time.Millisecond, Deadline: 30 * time.Second}
	refused := make(chan struct{})
	var once sync.Once
	c.Retry.OnRetry = func(err error, _ time.Duration) {
		if strings.Contains(err.Error(), "refused") {
			once.Do(func() { close(refused) })
		}
	}
	done := make(chan error, 1)
	go func() { done <- c.Ack(context.Background(), 1) }()
	<-refused // the call met the refused connection; now the service comes back
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: &scripted{answers: []func(http.ResponseWriter){okAnswer}}}
	go srv.Serve(ln)
	defer srv.Close()
	if err := <-done; err != nil {
		t.Fatalf("the call did not go on after the restart: %v", err)
	}
}

// TestClientName: every request carries the client's name
// (Trajflow-Client), host:pid by default.
func TestClientName(t *testing.T) {
	s := &scripted{answers: []func(http.ResponseWriter){okAnswer}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := client.New(srv.URL, "")
	if c.Name == "" || !strings.Contains(c.Name, ":") {
		t.Fatalf("default name %q, want host:pid", c.Name)
	}
	_ = c.Ack(context.Background(), 1)
	c.Name = "rank-3"
	_ = c.Pause(context.Background(), "")
	if got := s.headers[0].Get(client.HeaderClient); got == "" {
		t.Fatal("no Trajflow-Client header")
	}
	if got := s.headers[1].Get(client.HeaderClient); got != "rank-3" {
		t.Fatalf("Trajflow-Client %q, want rank-3", got)
	}
}

// TestRetryDeadlineFromFirstFailure: Retry.Deadline counts from a call's
// first failure, not from its start: a request that waited long for its
// step still gets its retries.
func TestRetryDeadlineFromFirstFailure(t *testing.T) {
	slow503 := func(w http.ResponseWriter) {
		time.Sleep(200 * time.Millisecond) // the wait for a step
		errorAnswer(503, "", client.ReasonStopping)(w)
	}
	s := &scripted{answers: []func(http.ResponseWriter){slow503, okAnswer}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := client.New(srv.URL, "")
	c.Retry = client.Retry{Initial: time.Millisecond, Max: time.Millisecond, Deadline: 100 * time.Millisecond}
	if err := c.Ack(context.Background(), 1); err != nil || s.calls != 2 {
		t.Fatalf("%v after %d calls, want success after a retry", err, s.calls)
	}
}
