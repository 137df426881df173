package sim

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
)

// AbortAll cuts a request in flight short: it answers with a prefix of
// the answer it would have given (ids and logprobs), finish reason abort.
func TestAbortAllAnswersWithThePartialOutput(t *testing.T) {
	opts := Options{Seed: 3, TimeScale: 1, A: time.Millisecond, C: time.Nanosecond, P: time.Nanosecond,
		Length: LengthModel{Median: 300, Sigma: 0.01, Cap: 1000}}
	req := &inference.Request{PromptTokenIDs: Tokenize("user: count"), Params: map[string]any{"max_tokens": 900, "seed": 1}}
	full := New(Options{Seed: 3, Length: opts.Length})
	defer full.Close()
	whole, err := full.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	s := New(opts)
	defer s.Close()
	if n := s.AbortAll(); n != 0 {
		t.Errorf("AbortAll of an idle server = %d", n)
	}
	type result struct {
		resp *inference.Response
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := s.Complete(context.Background(), req)
		ch <- result{r, err}
	}()
	time.Sleep(60 * time.Millisecond)
	if n := s.AbortAll(); n != 1 {
		t.Fatalf("AbortAll = %d, want 1", n)
	}
	res := <-ch
	if res.err != nil {
		t.Fatal(res.err)
	}
	got := res.resp
	k := len(got.Message.TokenIDs)
	if got.FinishReason != inference.FinishAbort || k == 0 || k >= len(whole.Message.TokenIDs) {
		t.Fatalf("finish %q with %d of %d tokens", got.FinishReason, k, len(whole.Message.TokenIDs))
	}
	for i := range k {
		if got.Message.TokenIDs[i] != whole.Message.TokenIDs[i] || got.Message.Logprobs[i] != whole.Message.Logprobs[i] {
			t.Fatalf("token %d: %d (%v), the whole answer's %d (%v)", i, got.Message.TokenIDs[i], got.Message.Logprobs[i], whole.Message.TokenIDs[i], whole.Message.Logprobs[i])
		}
	}
	if got.CompletionTokens != k || got.Message.Content != Detokenize(got.Message.TokenIDs, true) {
		t.Errorf("completion tokens %d, content %q", got.CompletionTokens, got.Message.Content)
	}
}

// POST /abort_request takes SGLang's {"abort_all": true}; anything else is
// a 400 naming what it accepts.
func TestHTTPAbortRequest(t *testing.T) {
	_, url := startHTTP(t, Options{Seed: 1})
	for _, tt := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"abort_all": true}`, 200, `{"aborted":0}`},
		{`{"rid": "x"}`, 200, `{"aborted":0}`},
		{`{}`, 400, "abort_all"},
		{`not json`, 400, "abort_request"},
	} {
		resp, err := http.Post(url+"/abort_request", "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.want) {
			t.Errorf("%s: %d %s, want %d containing %q", tt.body, resp.StatusCode, b, tt.status, tt.want)
		}
	}
}
