// Package ratelimittest is a provider-shaped OpenAI chat server at its
// rate limits, for tests and benchmarks of generate.rate_limit: it counts
// requests per minute and tokens per minute as OpenAI does (each request's
// prompt plus its max_tokens, when it arrives), refuses a request past
// either limit with a 429 and retry-after-ms, and sends x-ratelimit-limit-,
// -remaining- and -reset-requests/-tokens on every response.
package ratelimittest

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Options are the server's limits and answers.
type Options struct {
	// RequestsPerMinute and TokensPerMinute are the limits (0: none).
	RequestsPerMinute, TokensPerMinute int
	// Window is how much of a minute's rate each bucket holds (refilled
	// continuously); default a minute, as OpenAI's. A smaller window is a
	// stricter provider: no burst past its rate.
	Window time.Duration
	// Model is the model /v1/models lists; default "provider-model".
	Model string
	// Completion is the completion tokens of each answer, at most its
	// max_tokens; default 8.
	Completion int
}

// Stats are what the server saw.
type Stats struct {
	// Requests is the chat requests received; Refused those answered
	// 429; Answered those answered 200.
	Requests, Refused, Answered int
	// Tokens is the tokens counted against TokensPerMinute of the answered
	// requests (prompt plus max_tokens).
	Tokens int64
	// First and Last are when the first and the last answered request
	// arrived.
	First, Last time.Time
}

// TokensPerMinute is the rate of counted tokens between the first and the
// last answered request.
func (s Stats) TokensPerMinute() float64 {
	d := s.Last.Sub(s.First).Minutes()
	if d <= 0 {
		return 0
	}
	return float64(s.Tokens) / d
}

// RequestsPerMinute is the rate of answered requests between the first
// and the last.
func (s Stats) RequestsPerMinute() float64 {
	d := s.Last.Sub(s.First).Minutes()
	if d <= 0 {
		return 0
	}
	return float64(s.Answered-1) / d
}

type bucket struct {
	rate, cap, level float64
	last             time.Time
}

func newBucket(perMinute int, window time.Duration, now time.Time) *bucket {
	if perMinute <= 0 {
		return nil
	}
	rate := float64(perMinute) / 60
	c := rate * window.Seconds()
	return &bucket{rate: rate, cap: c, level: c, last: now}
}

func (b *bucket) refill(now time.Time) {
	b.level = math.Min(b.cap, b.level+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
}

// Provider is the running server.
type Provider struct {
	// URL is the base URL, ending in /v1.
	URL  string
	opts Options
	ts   *httptest.Server

	mu       sync.Mutex
	req, tok *bucket
	stats    Stats
}

// Start starts a server; Close stops it.
func Start(opts Options) *Provider {
	if opts.Window <= 0 {
		opts.Window = time.Minute
	}
	if opts.Model == "" {
		opts.Model = "provider-model"
	}
	if opts.Completion <= 0 {
		opts.Completion = 8
	}
	now := time.Now()
	p := &Provider{opts: opts, req: newBucket(opts.RequestsPerMinute, opts.Window, now), tok: newBucket(opts.TokensPerMinute, opts.Window, now)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, opts.Model)
	})
	mux.HandleFunc("POST /v1/chat/completions", p.chat)
	p.ts = httptest.NewServer(mux)
	p.URL = p.ts.URL + "/v1"
	return p
}

// Close stops the server.
func (p *Provider) Close() { p.ts.Close() }

// Stats returns the counts so far.
func (p *Provider) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// PromptTokens is how the server counts a prompt: 3 bytes a token and 4
// a message, denser than trajflow's estimate of 4 bytes, so that the
// limiter's correction by the reported usage is exercised.
func PromptTokens(messages []struct {
	Content string `json:"content"`
}) int {
	n := 3
	for _, m := range messages {
		n += 4 + (len(m.Content)+2)/3
	}
	return n
}

func (p *Provider) chat(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
		MaxTokens           *int `json:"max_tokens"`
		MaxCompletionTokens *int `json:"max_completion_tokens"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	prompt := PromptTokens(body.Messages)
	max := 0
	if body.MaxCompletionTokens != nil {
		max = *body.MaxCompletionTokens
	} else if body.MaxTokens != nil {
		max = *body.MaxTokens
	}
	cost := float64(prompt + max)

	p.mu.Lock()
	now := time.Now()
	p.stats.Requests++
	var wait time.Duration
	if b := p.req; b != nil {
		b.refill(now)
		if b.level < 1 {
			wait = max64(wait, secs((1-b.level)/b.rate))
		}
	}
	if b := p.tok; b != nil {
		b.refill(now)
		if b.level < cost {
			wait = max64(wait, secs((cost-b.level)/b.rate))
		}
	}
	if wait == 0 {
		if p.req != nil {
			p.req.level--
		}
		if p.tok != nil {
			p.tok.level -= cost
		}
		p.stats.Answered++
		p.stats.Tokens += int64(cost)
		if p.stats.First.IsZero() {
			p.stats.First = now
		}
		p.stats.Last = now
	} else {
		p.stats.Refused++
	}
	p.headers(w.Header())
	p.mu.Unlock()

	if wait > 0 {
		w.Header().Set("retry-after-ms", fmt.Sprint(wait.Milliseconds()+1))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
		return
	}
	completion := p.opts.Completion
	if max > 0 && completion > max {
		completion = max
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
		p.opts.Model, strings.Repeat("ok ", completion), prompt, completion, prompt+completion)
}

// headers sets OpenAI's x-ratelimit-* headers; p.mu is held.
func (p *Provider) headers(h http.Header) {
	for _, d := range []struct {
		name string
		b    *bucket
	}{{"requests", p.req}, {"tokens", p.tok}} {
		if d.b == nil {
			continue
		}
		h.Set("x-ratelimit-limit-"+d.name, fmt.Sprint(int64(d.b.rate*60)))
		h.Set("x-ratelimit-remaining-"+d.name, fmt.Sprint(int64(math.Max(0, d.b.level))))
		h.Set("x-ratelimit-reset-"+d.name, fmt.Sprintf("%dms", secs((d.b.cap-d.b.level)/d.b.rate).Milliseconds()))
	}
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func max64(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}
