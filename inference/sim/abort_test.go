package sim

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
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

// A prompt that ends in a prefix of its answer (an aborted request's
// partial output, sent again) is answered with the rest of that answer:
// the ids, logprobs and finish reason the whole answer has from there,
// max_tokens counted from the prefix. Open assistant text that is no
// prefix of the answer gets an answer of its own.
func TestContinuationAnswersTheRest(t *testing.T) {
	s := New(Options{Seed: 3, Length: LengthModel{Median: 300, Sigma: 0.01, Cap: 1000}})
	defer s.Close()
	prompt := Template{}.Render([]pipeline.Message{{Role: pipeline.RoleUser, Content: "What is 2 + 3?"}}, nil, true)
	complete := func(ids []int32, maxTokens int) *inference.Response {
		t.Helper()
		resp, err := s.Complete(context.Background(), &inference.Request{PromptTokenIDs: ids, Params: map[string]any{"max_tokens": maxTokens, "seed": 1}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, tc := range []struct {
		name      string
		maxTokens int
		cut       func(n int) int // the prefix's length, of the whole answer's n
	}{
		{"first token", 900, func(int) int { return 1 }},
		{"midway", 900, func(n int) int { return n / 2 }},
		{"last token left", 900, func(n int) int { return n - 1 }},
		{"cut by max_tokens", 120, func(n int) int { return n / 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whole := complete(prompt, tc.maxTokens)
			n := len(whole.Message.TokenIDs)
			k := tc.cut(n)
			rest := complete(slices.Concat(prompt, whole.Message.TokenIDs[:k]), tc.maxTokens-k)
			if !slices.Equal(rest.Message.TokenIDs, whole.Message.TokenIDs[k:]) || !slices.Equal(rest.Message.Logprobs, whole.Message.Logprobs[k:]) {
				t.Errorf("after %d of %d tokens: %v, want %v", k, n, rest.Message.TokenIDs, whole.Message.TokenIDs[k:])
			}
			if rest.FinishReason != whole.FinishReason || rest.CompletionTokens != n-k {
				t.Errorf("finish %q with %d tokens, want %q with %d", rest.FinishReason, rest.CompletionTokens, whole.FinishReason, n-k)
			}
		})
	}
	t.Run("not a prefix", func(t *testing.T) {
		whole := complete(prompt, 900)
		other := slices.Concat(prompt, Tokenize("something else"))
		got := complete(other, 900)
		if n := len(Tokenize("something else")); len(got.Message.TokenIDs) >= n && slices.Equal(got.Message.TokenIDs, whole.Message.TokenIDs[n:]) {
			t.Errorf("open text that is no prefix was continued as one")
		}
	})
}
