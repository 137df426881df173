package ratelimit

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"6m0s": MaxWait, "1s": time.Second, "20ms": 20 * time.Millisecond, "7.66s": 7660 * time.Millisecond,
		"1m2.5s": MaxWait, "0.5": 500 * time.Millisecond, "2": 2 * time.Second, " 3s ": 3 * time.Second,
		"": 0, "0s": 0, "0": 0, "-1s": 0, "-3": 0, "soon": 0, "1d": MaxWait, "0d20ms": 20 * time.Millisecond,
		"NaN": 0, "Inf": 0, "1e400": 0, "99999h": MaxWait, "500us": 500 * time.Microsecond,
	} {
		if got := ParseDuration(in); got != want {
			t.Errorf("ParseDuration(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestParseHeaders(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := http.Header{}
	h.Set("x-ratelimit-remaining-requests", "59")
	h.Set("x-ratelimit-remaining-tokens", "149984")
	h.Set("x-ratelimit-reset-requests", "1s")
	h.Set("x-ratelimit-reset-tokens", "6m0s")
	h.Set("Retry-After", now.Add(10*time.Second).Format(http.TimeFormat))
	s := ParseHeaders(h, now)
	want := Signals{RemainingRequests: 59, RemainingTokens: 149984, ResetRequests: time.Second, ResetTokens: MaxWait, RetryAfter: 10 * time.Second}
	if s != want {
		t.Fatalf("got %+v, want %+v", s, want)
	}
	h = http.Header{}
	h.Set("x-ratelimit-remaining-requests", "-5")
	h.Set("x-ratelimit-remaining-tokens", "lots")
	h.Set("retry-after-ms", "250")
	h.Set("Retry-After", "30")
	s = ParseHeaders(h, now)
	if s.RemainingRequests != -1 || s.RemainingTokens != -1 || s.RetryAfter != 250*time.Millisecond {
		t.Fatalf("got %+v", s)
	}
	if s := ParseHeaders(http.Header{}, now); s.RemainingRequests != -1 || s.RemainingTokens != -1 || s.RetryAfter != 0 || s.ResetRequests != 0 {
		t.Fatalf("empty headers: %+v", s)
	}
}

func FuzzParseHeaders(f *testing.F) {
	for _, s := range []string{"6m0s", "1s", "20ms", "0", "-1", "1.5", "Wed, 21 Oct 2015 07:28:00 GMT", "1d2h", "NaN", "9223372036854775807", "1e308"} {
		f.Add(s, s)
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, a, b string) {
		h := http.Header{}
		h.Set("x-ratelimit-remaining-requests", a)
		h.Set("x-ratelimit-remaining-tokens", b)
		h.Set("x-ratelimit-reset-requests", a)
		h.Set("x-ratelimit-reset-tokens", b)
		h.Set("Retry-After", a)
		h.Set("retry-after-ms", b)
		s := ParseHeaders(h, now)
		for _, d := range []time.Duration{s.ResetRequests, s.ResetTokens, s.RetryAfter} {
			if d < 0 || d > MaxWait {
				t.Fatalf("duration %s out of [0, %s] for %q %q", d, MaxWait, a, b)
			}
		}
		if s.RemainingRequests < -1 || s.RemainingTokens < -1 {
			t.Fatalf("remaining %+v", s)
		}
		l := New(Config{RequestsPerMinute: 60, InputTokensPerMinute: 600}, func() time.Time { return now }, nil)
		l.Observe(h) // must not panic
	})
}

// clock is a fake clock whose sleep advances it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

func TestWaitPacesRequests(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(Config{RequestsPerMinute: 600}, c.now, c.sleep) // 10/s, a burst of 10
	start := c.now()
	for range 40 {
		if err := l.Wait(context.Background(), 10); err != nil {
			t.Fatal(err)
		}
	}
	// 10 at once, then 30 at 10/s.
	if got := c.now().Sub(start); got < 2900*time.Millisecond || got > 3100*time.Millisecond {
		t.Fatalf("40 requests at 600/min took %s, want about 3s", got)
	}
	st := l.Stats()
	if st.Waits != 30 || st.Waiting != 0 || st.Waited < 2*time.Second {
		t.Fatalf("stats %+v", st)
	}
}

func TestTokenBuckets(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(Config{InputTokensPerMinute: 6000, OutputTokensPerMinute: 600}, c.now, c.sleep) // in 100/s, out 10/s
	start := c.now()
	// A request bigger than the bucket goes once it is full, leaving debt.
	l.Wait(context.Background(), 300)
	l.Wait(context.Background(), 50)
	if got := c.now().Sub(start); got < 2400*time.Millisecond || got > 2600*time.Millisecond {
		t.Fatalf("the second request waited %s for the first's debt, want 2.5s", got)
	}
	// Output tokens charged on arrival hold the next request back.
	l.Charge(50, 50, 40) // out: 10 - 40 = -30: 3s of debt
	mid := c.now()
	l.Wait(context.Background(), 1)
	if got := c.now().Sub(mid); got < 2900*time.Millisecond || got > 3100*time.Millisecond {
		t.Fatalf("waited %s after output debt, want 3s", got)
	}
}

func TestObserveTightens(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	cases := []struct {
		name string
		cfg  Config
		h    http.Header
		want time.Duration // the next request's wait
	}{
		{"retry-after holds everything", Config{RequestsPerMinute: 600}, hdr("Retry-After", "2"), 2 * time.Second},
		{"remaining lowers the bucket", Config{RequestsPerMinute: 600}, hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "5s"), 100 * time.Millisecond},
		{"no limit: remaining 0 waits for the reset", Config{}, hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1.5s"), 1500 * time.Millisecond},
		{"remaining 0 without a reset is ignored", Config{}, hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "0s"), 0},
		{"negative values are ignored", Config{RequestsPerMinute: 600}, hdr("x-ratelimit-remaining-requests", "-1", "Retry-After", "-3", "x-ratelimit-reset-requests", "-1s"), 0},
		{"zero retry-after is ignored", Config{RequestsPerMinute: 600}, hdr("Retry-After", "0"), 0},
		{"tokens tighten the input bucket", Config{InputTokensPerMinute: 6000}, hdr("x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1s"), 500 * time.Millisecond},
		{"a remaining count above the level changes nothing", Config{RequestsPerMinute: 600}, hdr("x-ratelimit-remaining-requests", "500", "x-ratelimit-reset-requests", "1s"), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := New(tc.cfg, c.now, c.sleep)
			l.Observe(tc.h)
			start := c.now()
			if err := l.Wait(context.Background(), 50); err != nil {
				t.Fatal(err)
			}
			got := c.now().Sub(start)
			if got < tc.want || got > tc.want+5*time.Millisecond {
				t.Fatalf("waited %s, want %s", got, tc.want)
			}
			if thr := l.Stats().Throttled; (tc.want > 0) != (thr > 0) {
				t.Fatalf("throttled %d", thr)
			}
		})
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	l := New(Config{RequestsPerMinute: 1}, nil, nil)
	l.Wait(context.Background(), 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := l.Wait(ctx, 0); err == nil {
		t.Fatal("a wait of a minute ended without error")
	}
	if st := l.Stats(); st.Waiting != 0 || st.Waits != 1 {
		t.Fatalf("stats %+v", st)
	}
}

type fixed struct{}

func (fixed) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	return &inference.Response{PromptTokens: 7, CompletionTokens: 5}, nil
}
func (fixed) Tokenize(ctx context.Context, req *inference.TokenizeRequest) ([]int32, error) {
	return []int32{1}, nil
}

func TestWrapKeepsTokenizer(t *testing.T) {
	c := Wrap(fixed{}, New(Config{RequestsPerMinute: 6000}, nil, nil))
	if _, ok := c.(inference.Tokenizer); !ok {
		t.Fatal("Wrap dropped Tokenize")
	}
	if _, err := c.Complete(context.Background(), &inference.Request{Messages: []pipeline.Message{{Role: "user", Content: "hi"}}}); err != nil {
		t.Fatal(err)
	}
	type only struct{ inference.Client }
	if _, ok := Wrap(only{fixed{}}, New(Config{}, nil, nil)).(inference.Tokenizer); ok {
		t.Fatal("Wrap added a Tokenize its backend lacks")
	}
}

func TestValidate(t *testing.T) {
	if err := (Config{RequestsPerMinute: -1}).Validate(); err == nil {
		t.Fatal("negative limit accepted")
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestEstimateTokens(t *testing.T) {
	if n := EstimateTokens(&inference.Request{PromptTokenIDs: []int32{1, 2, 3}}); n != 3 {
		t.Fatalf("token ids: %d", n)
	}
	n := EstimateTokens(&inference.Request{Messages: []pipeline.Message{{Role: "user", Content: string(make([]byte, 400))}}})
	if n < 100 || n > 120 {
		t.Fatalf("400 bytes estimated at %d tokens", n)
	}
}

func TestTokensPerMinuteCountsMaxTokens(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(Config{TokensPerMinute: 6000}, c.now, c.sleep) // 100/s, a burst of 100
	start := c.now()
	l.WaitFor(context.Background(), 20, 80) // the whole burst: prompt plus max_tokens
	l.Settle(20, 80, 20, 3, false)          // a short reply gives nothing back
	l.WaitFor(context.Background(), 20, 80)
	if got := c.now().Sub(start); got < 990*time.Millisecond || got > 1010*time.Millisecond {
		t.Fatalf("the second request waited %s, want 1s (its prompt and max_tokens)", got)
	}
	// A prompt reported smaller than estimated gives the difference back.
	l.Settle(20, 80, 10, 3, false)
	mid := c.now()
	l.WaitFor(context.Background(), 10, 0)
	if got := c.now().Sub(mid); got != 0 {
		t.Fatalf("waited %s with 10 tokens given back, want 0", got)
	}
}

func TestMaxTokens(t *testing.T) {
	for _, tc := range []struct {
		params map[string]any
		want   int
	}{
		{nil, 0},
		{map[string]any{"max_tokens": 64}, 64},
		{map[string]any{"max_tokens": float64(64)}, 64},
		{map[string]any{"max_tokens": json.Number("64")}, 64},
		{map[string]any{"max_tokens": 64, "max_completion_tokens": int64(32)}, 32},
		{map[string]any{"max_tokens": "many"}, 0},
	} {
		if got := MaxTokens(&inference.Request{Params: tc.params}); got != tc.want {
			t.Errorf("MaxTokens(%v) = %d, want %d", tc.params, got, tc.want)
		}
	}
}

func TestObserveRefillsFromAProvidersLargerBucket(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	hdr := http.Header{}
	hdr.Set("x-ratelimit-remaining-tokens", "25000")
	l := New(Config{TokensPerMinute: 6000}, c.now, c.sleep) // a burst of 100
	l.WaitFor(context.Background(), 100, 0)
	l.Observe(hdr) // the provider holds 250 times that: refilled at once
	start := c.now()
	l.WaitFor(context.Background(), 100, 0)
	if got := c.now().Sub(start); got != 0 {
		t.Fatalf("waited %s, want 0", got)
	}
	hdr.Set("x-ratelimit-remaining-tokens", "150") // under twice the burst: time refills it
	l.Observe(hdr)
	l.WaitFor(context.Background(), 100, 0)
	if got := c.now().Sub(start); got < 990*time.Millisecond {
		t.Fatalf("waited %s, want 1s", got)
	}
}

// refusing answers 429 (with Retry-After through the limiter, as the HTTP
// client's response hook does) to its first n requests, then answers.
type refusing struct {
	lim   *Limiter
	n     int
	wait  string // retry-after-ms
	calls int
}

func (r *refusing) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	r.calls++
	if r.n < 0 || r.calls <= r.n {
		h := http.Header{}
		if r.wait != "" {
			h.Set("retry-after-ms", r.wait)
		}
		r.lim.Observe(h)
		return nil, &inference.Error{Class: inference.ClassRateLimited, Status: 429, Msg: "slow down"}
	}
	return &inference.Response{PromptTokens: 7, CompletionTokens: 5}, nil
}

func TestA429IsSentAgain(t *testing.T) {
	for _, tc := range []struct {
		name     string
		refusals int // -1: every time
		real     bool
		deadline time.Duration // generate.deadline
		want     string        // the error; "" for an answer
		calls    int
	}{
		{"answered after three 429s", 3, false, 0, "", 4},
		{"answered after 100 429s", 100, false, 0, "", 101},
		// No Retry-After: 100ms doubling to 10s between tries, 10 minutes
		// without an answer after 67 tries.
		{"no Retry-After: backed off", -1, false, 0, "no request answered for 10m", 67},
		// Retry-After 200ms, a deadline 300ms away: a second try, not a third.
		{"the deadline leaves no time", -1, true, 0, "no time left before the deadline", 2},
		// Retry-After 2s, generate.deadline 5s: sent at 0, 2 and 4 s.
		{"generate.deadline leaves no time", -1, false, 5 * time.Second, "no time left before generate.deadline", 3},
		// Retry-After 2s: 300 tries in 10 minutes.
		{"no answer in the run for GiveUpAfter", -1, false, 0, "no request answered for 10m", 301},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{t: time.Unix(1000, 0)}
			lim := New(Config{RequestsPerMinute: 600}, c.now, c.sleep)
			inner := &refusing{lim: lim, n: tc.refusals, wait: "2000"}
			if strings.HasPrefix(tc.name, "no Retry-After") {
				inner.wait = ""
			}
			ctx := context.Background()
			if tc.real {
				lim = New(Config{RequestsPerMinute: 600}, nil, nil)
				inner = &refusing{lim: lim, n: tc.refusals, wait: "200"}
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
			}
			resp, err := WrapDeadline(inner, lim, tc.deadline).Complete(ctx, &inference.Request{Messages: []pipeline.Message{{Role: "user", Content: "hi"}}})
			if tc.want == "" {
				if err != nil || resp == nil {
					t.Fatalf("%v", err)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if inner.calls != tc.calls {
				t.Fatalf("%d calls, want %d", inner.calls, tc.calls)
			}
			st := lim.Stats()
			if refused := min(inner.calls, tc.calls-btoi(tc.want == "")); st.Refused != int64(refused) || st.Resent != int64(tc.calls-1) {
				t.Fatalf("stats %+v, want %d refused, %d sent again", st, refused, tc.calls-1)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
