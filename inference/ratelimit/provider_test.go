package ratelimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/ratelimit"
	"github.com/trajflow/trajflow/inference/ratelimit/ratelimittest"
	"github.com/trajflow/trajflow/pipeline"
)

// TestAtTheProvidersLimits sends requests through the limiter and the HTTP
// client to a provider that counts each request as its prompt plus its
// max_tokens, with generate.rate_limit at the provider's exact limits:
// under 2% are refused, and every request is answered (a 429 is sent
// again). bench/ratelimit measures the same at OpenAI's scale (600
// requests and 30,000 tokens a minute) and the share of the limit used
// (BENCHMARKS.md).
func TestAtTheProvidersLimits(t *testing.T) {
	const n = 150
	cases := []struct {
		name string
		srv  ratelimittest.Options
		cfg  ratelimit.Config
	}{
		// 10x OpenAI's 600 req/min and 30,000 tok/min, the tokens binding
		// (100 a request: 3,000 requests a minute).
		{"tokens_per_minute", ratelimittest.Options{RequestsPerMinute: 6000, TokensPerMinute: 300000, Window: time.Second},
			ratelimit.Config{RequestsPerMinute: 6000, TokensPerMinute: 300000}},
		// The requests binding.
		{"requests_per_minute", ratelimittest.Options{RequestsPerMinute: 6000, TokensPerMinute: 3000000, Window: time.Second},
			ratelimit.Config{RequestsPerMinute: 6000, TokensPerMinute: 3000000}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := ratelimittest.Start(tc.srv)
			defer p.Close()
			lim := ratelimit.New(tc.cfg, nil, nil)
			hc, err := openai.NewHTTP(inference.Config{Endpoints: []string{p.URL}, Model: "provider-model", Concurrency: 64, MaxAttempts: 5},
				openai.HTTPOptions{ReturnRateLimited: true, OnResponse: func(_ string, _ int, h http.Header) { lim.Observe(h) }})
			if err != nil {
				t.Fatal(err)
			}
			defer hc.Close()
			c := ratelimit.Wrap(hc, lim)
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					req := &inference.Request{Messages: []pipeline.Message{{Role: "user", Content: strings.Repeat("What is 12 plus 30? ", 6)}},
						Params: map[string]any{"max_tokens": 60}}
					if _, err := c.Complete(context.Background(), req); err != nil {
						errs <- err
					}
				}(i)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("a request was lost: %v", err)
			}
			st := p.Stats()
			ls := lim.Stats()
			t.Logf("%d requests, %d refused (%.1f%%), %d answered; %.0f tokens/min, %.0f requests/min; limiter: %d refused, %d sent again",
				st.Requests, st.Refused, 100*float64(st.Refused)/float64(st.Requests), st.Answered, st.TokensPerMinute(), st.RequestsPerMinute(), ls.Refused, ls.Resent)
			if st.Answered != n {
				t.Fatalf("%d answered, want %d", st.Answered, n)
			}
			if float64(st.Refused) >= 0.02*float64(st.Requests) {
				t.Fatalf("%d of %d requests refused, want under 2%%", st.Refused, st.Requests)
			}
		})
	}
}

// With ReturnRateLimited the HTTP client hands a 429 back at once, for the
// limiter to send again, instead of retrying around it.
func TestHTTPClientReturnsA429AtOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ret    bool
		called int
	}{{"returned at once", true, 1}, {"retried by the HTTP client", false, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			called := 0
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					w.Write([]byte(`{"data":[{"id":"m"}]}`))
					return
				}
				mu.Lock()
				called++
				mu.Unlock()
				http.Error(w, `{"error":{"message":"slow down"}}`, http.StatusTooManyRequests)
			}))
			defer hs.Close()
			hc, err := openai.NewHTTP(inference.Config{Endpoints: []string{hs.URL + "/v1"}, Model: "m", Concurrency: 1, MaxAttempts: 3},
				openai.HTTPOptions{ReturnRateLimited: tc.ret, Sleep: func(context.Context, time.Duration) error { return nil }})
			if err != nil {
				t.Fatal(err)
			}
			defer hc.Close()
			_, err = hc.Complete(context.Background(), &inference.Request{Messages: []pipeline.Message{{Role: "user", Content: "hi"}}})
			var ierr *inference.Error
			if !errors.As(err, &ierr) || ierr.Class != inference.ClassRateLimited {
				t.Fatalf("error %v, want rate_limited", err)
			}
			if called != tc.called {
				t.Fatalf("the server was called %d times, want %d", called, tc.called)
			}
		})
	}
}
