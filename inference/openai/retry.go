package openai

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/trajflow/trajflow/inference"
)

func retryable(class string) bool {
	switch class {
	case inference.ClassRateLimited, inference.ClassServer, inference.ClassConnection, inference.ClassTimeout, inference.ClassBadResponse:
		return true
	}
	return false
}

// backoff is full jitter: uniform in [0, min(max, base·2^(attempt-1))].
func (c *HTTPClient) backoff(attempt int) time.Duration {
	base, max := c.cfg.BackoffBase.D(), c.cfg.BackoffMax.D()
	if base <= 0 {
		return 0
	}
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// retryAfter parses a Retry-After header: seconds (fractions accepted) or an
// HTTP date, capped at MaxRetryAfter; 0 when absent or unparseable.
func (c *HTTPClient) retryAfter(h string) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseFloat(h, 64); err == nil {
		if secs <= 0 || secs != secs {
			return 0
		}
		if secs > c.opts.MaxRetryAfter.Seconds() {
			return c.opts.MaxRetryAfter
		}
		d = time.Duration(secs * float64(time.Second))
	} else if t, err := http.ParseTime(h); err == nil {
		d = t.Sub(c.opts.Now())
	} else {
		return 0
	}
	if d <= 0 {
		return 0
	}
	if d > c.opts.MaxRetryAfter {
		d = c.opts.MaxRetryAfter
	}
	return d
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retryWait decides after attempt failed with aerr on ep: how long to
// wait before the next one, or the request's final error (not retryable,
// the breaker open, the attempts spent, or no time left).
func (c *HTTPClient) retryWait(ctx context.Context, ep *endpoint, aerr *inference.Error, broken error, attempt int, retryAfter time.Duration) (time.Duration, error) {
	if !retryable(aerr.Class) || aerr.Class == inference.ClassRateLimited && c.opts.ReturnRateLimited {
		return 0, aerr
	}
	if broken != nil {
		return 0, brokenError(broken)
	}
	if attempt >= c.cfg.MaxAttempts {
		aerr.Msg = fmt.Sprintf("%s (after %d attempts)", aerr.Msg, attempt)
		return 0, aerr
	}
	wait := c.backoff(attempt)
	if retryAfter > wait && !c.fleet.hasAlternative(ep) {
		wait = retryAfter
	}
	if dl, ok := ctx.Deadline(); ok && c.opts.Now().Add(wait).After(dl) {
		aerr.Msg = fmt.Sprintf("%s (after %d attempts; no time left to retry)", aerr.Msg, attempt)
		return 0, aerr
	}
	return wait, nil
}

// ctxErr is the error of a request whose context ended: a timeout *Error
// for generate.deadline, else the context's own error (cancelled).
func (c *HTTPClient) ctxErr(ctx context.Context, last *inference.Error, attempts int) error {
	if errors.Is(context.Cause(ctx), errDeadline) {
		msg := fmt.Sprintf("generate.deadline (%s) exceeded after %d attempts", c.cfg.Deadline.D(), attempts)
		if last != nil {
			msg += "; last error: " + last.Error()
		}
		return &inference.Error{Class: inference.ClassTimeout, Msg: msg}
	}
	return fmt.Errorf("llm: request abandoned after %d attempts: %w", attempts, ctx.Err())
}
