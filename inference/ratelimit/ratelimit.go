// Package ratelimit keeps a run under an account's rate limits
// (generate.rate_limit): an inference client that makes each request wait
// for room in token buckets of requests, input tokens and output tokens
// per minute, and that tightens them with what every response's
// x-ratelimit-* and Retry-After headers say.
package ratelimit

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// Config is the generate.rate_limit section: the account's limits, for
// the whole fleet. A limit left at 0 is not enforced (the response
// headers still tighten the limiter).
type Config struct {
	// RequestsPerMinute bounds the requests sent per minute.
	RequestsPerMinute int `yaml:"requests_per_minute"`
	// InputTokensPerMinute bounds the prompt tokens per minute; a
	// request's are estimated before it is sent (about 4 characters a
	// token) and corrected by the usage its response reports.
	InputTokensPerMinute int `yaml:"input_tokens_per_minute"`
	// OutputTokensPerMinute bounds the generated tokens per minute, charged
	// as responses arrive: a request waits while the bucket is in debt.
	OutputTokensPerMinute int `yaml:"output_tokens_per_minute"`
}

// Enabled reports whether any limit is set.
func (c Config) Enabled() bool {
	return c.RequestsPerMinute > 0 || c.InputTokensPerMinute > 0 || c.OutputTokensPerMinute > 0
}

// Validate reports every problem of the section at once.
func (c Config) Validate() error {
	var p pipeline.Problems
	for key, v := range map[string]int{"requests_per_minute": c.RequestsPerMinute, "input_tokens_per_minute": c.InputTokensPerMinute, "output_tokens_per_minute": c.OutputTokensPerMinute} {
		if v < 0 {
			p.Add(key, "must be >= 0 (0: no limit), got %d", v)
		}
	}
	return p.Err()
}

// bucket is one limit: it holds at most a second's worth of its
// per-minute rate (so a run never bursts past a server that refills
// smoothly) and refills continuously.
type bucket struct {
	rate  float64 // per second
	cap   float64
	level float64
	last  time.Time
}

func newBucket(perMinute int, now time.Time) *bucket {
	if perMinute <= 0 {
		return nil
	}
	rate := float64(perMinute) / 60
	c := rate
	if c < 1 {
		c = 1
	}
	return &bucket{rate: rate, cap: c, level: c, last: now}
}

func (b *bucket) refill(now time.Time) {
	if b == nil {
		return
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.level += dt * b.rate
		if b.level > b.cap {
			b.level = b.cap
		}
	}
	b.last = now
}

// need is how long until the bucket holds want (at most its capacity);
// 0 when it does.
func (b *bucket) need(want float64) time.Duration {
	if b == nil {
		return 0
	}
	if want > b.cap {
		want = b.cap
	}
	if b.level >= want {
		return 0
	}
	return time.Duration((want - b.level) / b.rate * float64(time.Second))
}

// lower tightens the bucket to at most v.
func (b *bucket) lower(v float64) {
	if b != nil && b.level > v {
		b.level = v
	}
}

// Stats are the limiter's counters.
type Stats struct {
	// Waiting is the requests waiting for room now.
	Waiting int
	// Waited is the time requests spent waiting, summed, and Waits how
	// many requests waited at all.
	Waited time.Duration
	Waits  int64
	// Throttled counts responses whose headers tightened the limiter.
	Throttled int64
}

// Limiter is the run's rate limiter. It is safe for concurrent use.
type Limiter struct {
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu             sync.Mutex
	req, in, out   *bucket
	blockedUntil   time.Time
	waiting        int
	waited         time.Duration
	waits          int64
	throttled      int64
	signalInTokens bool // x-ratelimit-*-tokens tighten in (else out)
}

// New builds a limiter for cfg. now and sleep replace the clock (nil: the
// real ones).
func New(cfg Config, now func() time.Time, sleep func(ctx context.Context, d time.Duration) error) *Limiter {
	if now == nil {
		now = time.Now
	}
	if sleep == nil {
		sleep = sleepCtx
	}
	t := now()
	l := &Limiter{now: now, sleep: sleep,
		req: newBucket(cfg.RequestsPerMinute, t), in: newBucket(cfg.InputTokensPerMinute, t), out: newBucket(cfg.OutputTokensPerMinute, t)}
	l.signalInTokens = l.in != nil || l.out == nil
	return l
}

// Stats returns the counters now.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Waiting: l.waiting, Waited: l.waited, Waits: l.waits, Throttled: l.throttled}
}

// Wait blocks until a request of about inTokens prompt tokens has room,
// and charges it; it fails only when ctx ends.
func (l *Limiter) Wait(ctx context.Context, inTokens int) error {
	start := l.now()
	counted := false
	defer func() {
		if counted {
			l.mu.Lock()
			l.waiting--
			l.waited += l.now().Sub(start)
			l.mu.Unlock()
		}
	}()
	for {
		l.mu.Lock()
		now := l.now()
		l.req.refill(now)
		l.in.refill(now)
		l.out.refill(now)
		d := l.blockedUntil.Sub(now)
		for _, w := range []time.Duration{l.req.need(1), l.in.need(float64(inTokens)), l.out.need(0)} {
			if w > d {
				d = w
			}
		}
		if d <= 0 {
			if l.req != nil {
				l.req.level--
			}
			if l.in != nil {
				l.in.level -= float64(inTokens)
			}
			l.mu.Unlock()
			return nil
		}
		if !counted {
			counted = true
			l.waiting++
			l.waits++
		}
		l.mu.Unlock()
		if d < time.Millisecond {
			d = time.Millisecond
		}
		if err := l.sleep(ctx, d); err != nil {
			return err
		}
	}
}

// Charge settles a request's tokens once its response arrived: the input
// estimate is corrected to the prompt tokens reported, and the generated
// tokens are taken from the output bucket.
func (l *Limiter) Charge(estimated, prompt, completion int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if l.in != nil && prompt > 0 {
		l.in.refill(now)
		l.in.level -= float64(prompt - estimated)
		if l.in.level > l.in.cap {
			l.in.level = l.in.cap
		}
	}
	if l.out != nil {
		l.out.refill(now)
		l.out.level -= float64(completion)
	}
}

// Observe tightens the limiter with a response's headers: a Retry-After
// holds every request back that long; a remaining count lowers the
// bucket's level to it; a remaining count of 0 with a reset time holds
// back the requests of a dimension that has no configured limit until the
// reset. Absent, negative or zero values are ignored (a remaining count of
// 0 only with a reset time), as some providers send them meaning nothing.
func (l *Limiter) Observe(h http.Header) {
	s := ParseHeaders(h, l.now())
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	tightened := false
	block := func(d time.Duration) {
		if until := now.Add(d); until.After(l.blockedUntil) {
			l.blockedUntil = until
			tightened = true
		}
	}
	if s.RetryAfter > 0 {
		block(s.RetryAfter)
	}
	apply := func(b *bucket, remaining int64, reset time.Duration) {
		switch {
		case remaining < 0:
		case remaining == 0 && reset <= 0:
			// "0" with no reset time: a provider's placeholder.
		case b != nil:
			b.refill(now)
			if b.level > float64(remaining) {
				b.lower(float64(remaining))
				tightened = true
			}
		case remaining == 0:
			block(reset)
		}
	}
	apply(l.req, s.RemainingRequests, s.ResetRequests)
	tokens := l.out
	if l.signalInTokens {
		tokens = l.in
	}
	apply(tokens, s.RemainingTokens, s.ResetTokens)
	if tightened {
		l.throttled++
	}
}

// EstimateTokens estimates a request's prompt tokens: its token ids when
// it sends them, else about one token per 4 bytes of its messages and
// tools, and a few per message.
func EstimateTokens(req *inference.Request) int {
	if req.PromptTokenIDs != nil {
		return len(req.PromptTokenIDs)
	}
	n := 0
	for _, m := range req.Messages {
		n += 4 + (len(m.Content)+3)/4
		for _, p := range m.Parts {
			if p.Type == pipeline.PartImage {
				n += 85 // an image's least cost at OpenAI's low detail
			}
		}
		for _, tc := range m.ToolCalls {
			n += (len(tc.Name) + len(tc.Arguments) + 3) / 4
		}
	}
	for _, t := range req.Tools {
		n += (len(t) + 3) / 4
	}
	return n + 3
}

// Client makes each request wait for the limiter before inner sends it.
type Client struct {
	inner inference.Client
	lim   *Limiter
}

// Wrap returns inner behind lim; the result keeps inner's Tokenize.
func Wrap(inner inference.Client, lim *Limiter) inference.Client {
	return inference.Decorate(&Client{inner: inner, lim: lim}, inner)
}

// Complete implements inference.Client.
func (c *Client) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	est := EstimateTokens(req)
	if err := c.lim.Wait(ctx, est); err != nil {
		return nil, err
	}
	resp, err := c.inner.Complete(ctx, req)
	if resp != nil {
		c.lim.Charge(est, resp.PromptTokens, resp.CompletionTokens)
	}
	return resp, err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
