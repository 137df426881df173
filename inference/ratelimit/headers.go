package ratelimit

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxWait caps every wait a header asks for.
const MaxWait = time.Minute

// Signals are what one response's headers say of the account's limits.
// Remaining counts are -1 and durations 0 when a header is absent or
// unusable (negative, zero where zero makes no sense, unparseable).
type Signals struct {
	RemainingRequests, RemainingTokens int64
	ResetRequests, ResetTokens         time.Duration
	// RetryAfter is Retry-After (seconds or an HTTP date) or OpenAI's
	// retry-after-ms.
	RetryAfter time.Duration
}

// ParseHeaders reads x-ratelimit-remaining-requests/-tokens,
// x-ratelimit-reset-requests/-tokens, retry-after-ms and Retry-After.
// now dates an HTTP-date Retry-After.
func ParseHeaders(h http.Header, now time.Time) Signals {
	s := Signals{
		RemainingRequests: parseCount(h.Get("x-ratelimit-remaining-requests")),
		RemainingTokens:   parseCount(h.Get("x-ratelimit-remaining-tokens")),
		ResetRequests:     ParseDuration(h.Get("x-ratelimit-reset-requests")),
		ResetTokens:       ParseDuration(h.Get("x-ratelimit-reset-tokens")),
	}
	if ms := strings.TrimSpace(h.Get("retry-after-ms")); ms != "" {
		if v, err := strconv.ParseFloat(ms, 64); err == nil && v > 0 && !math.IsInf(v, 0) {
			s.RetryAfter = capWait(v / 1000)
		}
	}
	if s.RetryAfter == 0 {
		s.RetryAfter = parseRetryAfter(h.Get("Retry-After"), now)
	}
	return s
}

// parseCount is a non-negative count; -1 when absent or not one.
func parseCount(v string) int64 {
	v = strings.TrimSpace(v)
	if v == "" {
		return -1
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || f < 0 || f > math.MaxInt64/2 || f != f {
			return -1
		}
		n = int64(f)
	}
	if n < 0 {
		return -1
	}
	return n
}

// ParseDuration reads a reset header: OpenAI's duration format ("6m0s",
// "1s", "20ms", "1h2m3.5s", "7.66s"), or plain seconds ("0.5"). Absent,
// zero, negative or unparseable values are 0 (ignored); the result is
// capped at MaxWait.
func ParseDuration(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f <= 0 || f != f || math.IsInf(f, 0) {
			return 0
		}
		return capWait(f)
	}
	// Some providers add a day unit; Go's durations stop at hours.
	if d, rest, ok := strings.Cut(v, "d"); ok && !strings.Contains(rest, "d") {
		days, err := strconv.ParseFloat(d, 64)
		if err != nil || days < 0 {
			return 0
		}
		if days > 0 {
			return MaxWait
		}
		v = rest
		if v == "" {
			return 0
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0
	}
	if d > MaxWait {
		return MaxWait
	}
	return d
}

func capWait(secs float64) time.Duration {
	if secs >= MaxWait.Seconds() {
		return MaxWait
	}
	return time.Duration(secs * float64(time.Second))
}

// parseRetryAfter is Retry-After in seconds or as an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f <= 0 || f != f || math.IsInf(f, 0) {
			return 0
		}
		return capWait(f)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	d := t.Sub(now)
	if d <= 0 {
		return 0
	}
	if d > MaxWait {
		return MaxWait
	}
	return d
}
