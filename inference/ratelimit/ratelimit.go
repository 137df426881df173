// Package ratelimit keeps a run under an account's rate limits
// (generate.rate_limit): an inference client that makes each request wait
// for room in token buckets of requests, input tokens and output tokens
// per minute, and that tightens them with what every response's
// x-ratelimit-* and Retry-After headers say. A request refused with a 429
// waits for room again and is sent again, so a 429 loses no row while the
// request's context allows another try.
package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
	// TokensPerMinute bounds the tokens per minute as OpenAI counts them:
	// each request is its prompt (estimated as for
	// input_tokens_per_minute, then corrected by the usage its response
	// reports) plus its max_tokens (or max_completion_tokens; none: the
	// prompt alone), charged when it is sent, whatever the length of the
	// reply. input_ and output_tokens_per_minute are Anthropic's split;
	// set the limits your provider states.
	TokensPerMinute int `yaml:"tokens_per_minute"`
}

// Enabled reports whether any limit is set.
func (c Config) Enabled() bool {
	return c.RequestsPerMinute > 0 || c.InputTokensPerMinute > 0 || c.OutputTokensPerMinute > 0 || c.TokensPerMinute > 0
}

// Validate reports every problem of the section at once.
func (c Config) Validate() error {
	var p pipeline.Problems
	for key, v := range map[string]int{"requests_per_minute": c.RequestsPerMinute, "input_tokens_per_minute": c.InputTokensPerMinute, "output_tokens_per_minute": c.OutputTokensPerMinute, "tokens_per_minute": c.TokensPerMinute} {
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
	// Refused counts the 429s the requests got, and Resent those the
	// limiter sent again once it had room.
	Refused, Resent int64
}

// Limiter is the run's rate limiter. It is safe for concurrent use.
type Limiter struct {
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu           sync.Mutex
	req, in, out *bucket
	tok          *bucket // prompt plus max_tokens (tokens_per_minute)
	blockedUntil time.Time
	// inflightReq and inflightTok are the requests sent and not yet
	// answered, and their prompt-plus-max_tokens charge: a response's
	// remaining counts may not have seen them yet.
	inflightReq, inflightTok float64
	inflightIn               float64
	lastOK                   time.Time // the last answered request
	// estimated and reported sum the prompt estimates and the prompt
	// tokens reported of the answered requests: their ratio scales the
	// estimates (the provider's counting is the one that matters).
	estimated, reported float64
	refused, resent     int64
	waiting             int
	waited              time.Duration
	waits               int64
	throttled           int64
	signalInTokens      bool // x-ratelimit-*-tokens tighten in (else out)
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
	l := &Limiter{now: now, sleep: sleep, lastOK: t,
		req: newBucket(cfg.RequestsPerMinute, t), in: newBucket(cfg.InputTokensPerMinute, t), out: newBucket(cfg.OutputTokensPerMinute, t),
		tok: newBucket(cfg.TokensPerMinute, t)}
	l.signalInTokens = l.in != nil || l.out == nil
	return l
}

// Stats returns the counters now.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Waiting: l.waiting, Waited: l.waited, Waits: l.waits, Throttled: l.throttled, Refused: l.refused, Resent: l.resent}
}

// Wait blocks until a request of about inTokens prompt tokens (and no
// max_tokens) has room, and charges it; it fails only when ctx ends.
func (l *Limiter) Wait(ctx context.Context, inTokens int) error {
	return l.WaitFor(ctx, inTokens, 0)
}

// WaitFor blocks until a request of about inTokens prompt tokens asking
// for at most maxTokens has room, and charges it; it fails only when ctx
// ends. Settle gives its answer back.
func (l *Limiter) WaitFor(ctx context.Context, inTokens, maxTokens int) error {
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
		l.tok.refill(now)
		d := l.blockedUntil.Sub(now)
		for _, w := range []time.Duration{l.req.need(1), l.in.need(float64(inTokens)), l.out.need(0), l.tok.need(float64(inTokens + maxTokens))} {
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
			if l.tok != nil {
				l.tok.level -= float64(inTokens + maxTokens)
			}
			l.inflightReq++
			l.inflightIn += float64(inTokens)
			l.inflightTok += float64(inTokens + maxTokens)
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
	l.Settle(estimated, 0, prompt, completion, false)
}

// Settle ends a request that WaitFor(estimated, maxTokens) let through:
// refused (a 429) charges nothing more, as the provider's count was
// ahead of the limiter's; else the prompt estimate is corrected to the
// prompt tokens reported (when reported), and the generated tokens are
// taken from the output bucket.
func (l *Limiter) Settle(estimated, maxTokens, prompt, completion int, refused bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.inflightReq = math.Max(0, l.inflightReq-1)
	l.inflightIn = math.Max(0, l.inflightIn-float64(estimated))
	l.inflightTok = math.Max(0, l.inflightTok-float64(estimated+maxTokens))
	if refused {
		l.refused++
		return
	}
	l.lastOK = now
	for _, b := range []*bucket{l.in, l.tok} {
		if b != nil && prompt > 0 {
			b.refill(now)
			b.level -= float64(prompt - estimated)
			if b.level > b.cap {
				b.level = b.cap
			}
		}
	}
	if l.out != nil {
		l.out.refill(now)
		l.out.level -= float64(completion)
	}
}

// Observe sets the limiter by a response's headers: a Retry-After holds
// every request back that long; a remaining count, less what was sent
// since and is not answered yet, becomes the bucket's level (lowered to
// it; refilled to the bucket's capacity when the provider has more than
// twice that left); a remaining count of 0 with a reset time
// holds back the requests of a dimension that has no configured limit
// until the reset. Absent, negative or zero values are ignored (a
// remaining count of 0 only with a reset time), as some providers send
// them meaning nothing.
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
	apply := func(b *bucket, remaining int64, reset time.Duration, inflight float64) {
		switch {
		case remaining < 0:
		case remaining == 0 && reset <= 0:
			// "0" with no reset time: a provider's placeholder.
		case b != nil:
			b.refill(now)
			// The requests in flight may or may not be in the count:
			// taking them off again errs on the side of a 429 fewer.
			target := float64(remaining) - inflight
			switch {
			case b.level > target:
				b.lower(target)
				tightened = true
			case target >= 2*b.cap && b.level < b.cap:
				// The provider holds more than twice the limiter's
				// burst (OpenAI's buckets hold a minute): refilled now
				// rather than by time, with a burst's margin for
				// headers that arrive out of order.
				b.level = b.cap
			}
		case remaining == 0:
			block(reset)
		}
	}
	apply(l.req, s.RemainingRequests, s.ResetRequests, l.inflightReq)
	switch {
	case l.tok != nil:
		apply(l.tok, s.RemainingTokens, s.ResetTokens, l.inflightTok)
	case l.signalInTokens:
		apply(l.in, s.RemainingTokens, s.ResetTokens, l.inflightIn)
	default:
		apply(l.out, s.RemainingTokens, s.ResetTokens, 0)
	}
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

// MaxTokens is a request's max_completion_tokens, else its max_tokens;
// 0 when it sets neither.
func MaxTokens(req *inference.Request) int {
	for _, k := range []string{"max_completion_tokens", "max_tokens"} {
		switch v := req.Params[k].(type) {
		case int:
			return v
		case int64:
			return int(v)
		case float64:
			return int(v)
		case json.Number:
			if n, err := v.Int64(); err == nil {
				return int(n)
			}
		}
	}
	return 0
}

// GiveUpAfter is how long a request refused with 429s keeps being sent
// again while no request of the run is answered: an account out of quota
// answers 429 for ever.
const GiveUpAfter = 10 * time.Minute

// Client makes each request wait for the limiter before inner sends it,
// and sends a request refused with a 429 again once the limiter has room
// (inner should return 429s at once: openai.HTTPOptions.ReturnRateLimited).
type Client struct {
	inner    inference.Client
	lim      *Limiter
	deadline time.Duration
}

// Wrap returns inner behind lim; the result keeps inner's Tokenize.
func Wrap(inner inference.Client, lim *Limiter) inference.Client {
	return WrapDeadline(inner, lim, 0)
}

// WrapDeadline is Wrap with generate.deadline: a request refused with a
// 429 is not sent again once the limiter's wait would end past deadline
// after its first send (0: no deadline but the context's).
func WrapDeadline(inner inference.Client, lim *Limiter, deadline time.Duration) inference.Client {
	return inference.Decorate(&Client{inner: inner, lim: lim, deadline: deadline}, inner)
}

// Complete implements inference.Client.
func (c *Client) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	raw, max := EstimateTokens(req), MaxTokens(req)
	est := c.lim.Calibrate(raw)
	var first, sent time.Time
	for tries := 1; ; tries++ {
		if err := c.lim.WaitFor(ctx, est, max); err != nil {
			return nil, err
		}
		if sent.IsZero() {
			sent = c.lim.now()
		}
		resp, err := c.inner.Complete(ctx, req)
		var ierr *inference.Error
		if resp == nil && errors.As(err, &ierr) && ierr.Class == inference.ClassRateLimited {
			c.lim.Settle(est, max, 0, 0, true)
			if first.IsZero() {
				first = c.lim.now()
			}
			var dl time.Time
			if c.deadline > 0 {
				dl = sent.Add(c.deadline)
			}
			if why := c.lim.stop(ctx, first, dl); why != "" {
				ierr.Msg = fmt.Sprintf("%s (generate.rate_limit: %d tries; %s)", ierr.Msg, tries, why)
				return nil, err
			}
			c.lim.mu.Lock()
			c.lim.resent++
			// A 429 without a Retry-After still holds the account back:
			// 100ms doubling per try, at most 10s.
			if now := c.lim.now(); !c.lim.blockedUntil.After(now) {
				c.lim.blockedUntil = now.Add(min(100*time.Millisecond<<min(tries-1, 7), 10*time.Second))
			}
			c.lim.mu.Unlock()
			continue
		}
		prompt, completion := 0, 0
		if resp != nil {
			prompt, completion = resp.PromptTokens, resp.CompletionTokens
		}
		c.lim.Settle(est, max, prompt, completion, false)
		if prompt > 0 {
			c.lim.mu.Lock()
			c.lim.estimated += float64(raw)
			c.lim.reported += float64(prompt)
			c.lim.mu.Unlock()
		}
		return resp, err
	}
}

// Calibrate scales a prompt estimate by what the answered requests'
// usage reported against their estimates; before any answer, by 4/3 (3
// bytes a token rather than 4: code and many languages run denser, and
// the first requests go out together).
func (l *Limiter) Calibrate(est int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.estimated < 1 {
		return (est*4 + 2) / 3
	}
	return int(math.Ceil(float64(est) * l.reported / l.estimated))
}

// stop says why a request refused since first is not sent again: its
// context ended or ends before the limiter lets it through, so does
// deadline (generate.deadline; zero: none), or no request of the run was
// answered for GiveUpAfter; "" to send it again.
func (l *Limiter) stop(ctx context.Context, first, deadline time.Time) string {
	if ctx.Err() != nil {
		return "the request's context ended"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if dl, ok := ctx.Deadline(); ok && l.blockedUntil.After(dl) {
		return "no time left before the deadline to try again"
	}
	if !deadline.IsZero() && l.blockedUntil.After(deadline) {
		return "no time left before generate.deadline to try again"
	}
	if now.Sub(first) >= GiveUpAfter && !l.lastOK.After(first) {
		return fmt.Sprintf("no request answered for %s", now.Sub(l.lastOK).Round(time.Second))
	}
	return ""
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
