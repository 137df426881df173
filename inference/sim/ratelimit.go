package sim

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// RateLimit is an account's rate limits as the simulated HTTP server
// enforces them: token buckets refilled continuously, each holding Window's
// worth of its per-minute limit. A request is refused (429, with
// Retry-After) when the request bucket is empty or the token bucket is in
// debt; a request's tokens (prompt and completion) are charged once it is
// answered. Every response carries x-ratelimit-limit-, -remaining- and
// -reset-requests and -tokens in OpenAI's format.
type RateLimit struct {
	// RequestsPerMinute and TokensPerMinute are the limits (0: none).
	RequestsPerMinute, TokensPerMinute int
	// Window is how much of a minute's limit a bucket holds (default one
	// minute, as OpenAI's; a shorter one makes bursts fail sooner).
	Window time.Duration
}

// RateStats count what the rate limits did.
type RateStats struct {
	// Accepted requests passed the limits; Limited were refused with 429.
	Accepted, Limited int64
}

type simBucket struct {
	limit     float64 // per minute
	rate, cap float64
	level     float64
	last      time.Time
}

func (b *simBucket) refill(now time.Time) {
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.level = math.Min(b.cap, b.level+dt*b.rate)
	}
	b.last = now
}

// reset is how long until the bucket is full.
func (b *simBucket) reset() time.Duration {
	if b.level >= b.cap {
		return 0
	}
	return time.Duration((b.cap - b.level) / b.rate * float64(time.Second))
}

type limits struct {
	mu                sync.Mutex
	req, tok          *simBucket
	accepted, limited atomic.Int64
}

func newLimits(rl RateLimit) *limits {
	if rl.RequestsPerMinute <= 0 && rl.TokensPerMinute <= 0 {
		return nil
	}
	w := rl.Window
	if w <= 0 {
		w = time.Minute
	}
	now := time.Now()
	mk := func(perMin int) *simBucket {
		if perMin <= 0 {
			return nil
		}
		rate := float64(perMin) / 60
		c := math.Max(1, rate*w.Seconds())
		return &simBucket{limit: float64(perMin), rate: rate, cap: c, level: c, last: now}
	}
	return &limits{req: mk(rl.RequestsPerMinute), tok: mk(rl.TokensPerMinute)}
}

// RateStats returns the rate limits' counters (zero without limits).
func (s *Server) RateStats() RateStats {
	if s.limits == nil {
		return RateStats{}
	}
	return RateStats{Accepted: s.limits.accepted.Load(), Limited: s.limits.limited.Load()}
}

// admit takes a request from the buckets, or refuses it with 429. It
// writes the x-ratelimit-* headers either way; false means the response
// was written.
func (l *limits) admit(w http.ResponseWriter) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	now := time.Now()
	var wait time.Duration
	if b := l.req; b != nil {
		b.refill(now)
		if b.level < 1 {
			wait = time.Duration((1 - b.level) / b.rate * float64(time.Second))
		}
	}
	if b := l.tok; b != nil {
		b.refill(now)
		if b.level < 0 {
			if d := time.Duration(-b.level / b.rate * float64(time.Second)); d > wait {
				wait = d
			}
		}
	}
	ok := wait == 0
	if ok && l.req != nil {
		l.req.level--
	}
	l.headers(w)
	l.mu.Unlock()
	if ok {
		l.accepted.Add(1)
		return true
	}
	l.limited.Add(1)
	secs := wait.Seconds()
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(secs))))
	w.Header().Set("retry-after-ms", strconv.FormatInt(int64(math.Ceil(secs*1000)), 10))
	writeError(w, http.StatusTooManyRequests, fmt.Sprintf("Rate limit reached: please try again in %s.", wait.Round(time.Millisecond)))
	return false
}

// charge takes an answered request's tokens.
func (l *limits) charge(tokens int) {
	if l == nil || l.tok == nil {
		return
	}
	l.mu.Lock()
	l.tok.refill(time.Now())
	l.tok.level -= float64(tokens)
	l.mu.Unlock()
}

func (l *limits) headers(w http.ResponseWriter) {
	h := w.Header()
	for name, b := range map[string]*simBucket{"requests": l.req, "tokens": l.tok} {
		if b == nil {
			continue
		}
		h.Set("x-ratelimit-limit-"+name, strconv.Itoa(int(b.limit)))
		h.Set("x-ratelimit-remaining-"+name, strconv.Itoa(int(math.Max(0, math.Floor(b.level)))))
		h.Set("x-ratelimit-reset-"+name, openAIDuration(b.reset()))
	}
}

// openAIDuration formats d as OpenAI's reset headers do: "6m0s", "1s",
// "20ms".
func openAIDuration(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return d.Round(time.Millisecond).String()
}
