package openai

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/trajflow/trajflow/inference"
)

// DefaultBreakAfter is HTTPOptions.BreakAfter's default.
const DefaultBreakAfter = 8

// ErrBroken marks the error of a request refused because the client's
// circuit breaker is open.
var ErrBroken = errors.New("circuit breaker open")

// breaker stops a client whose requests keep failing for a cause no retry
// can fix: the key refused (401, 403), the model or path unknown (404), or
// nothing listening (connection refused, unknown host), on every endpoint.
// It trips after `after` consecutive attempts that all failed so, with at
// least one such failure on every endpoint of the fleet and no other
// outcome in between (any success, or any other failure, such as a 5xx or
// a timeout, resets it). Once open it stays open: every request fails at
// once with its error.
type breaker struct {
	after   int
	eps     int
	onBreak func(error)

	mu     sync.Mutex
	streak int
	failed map[int]bool // endpoints with a fatal failure in the streak
	err    error        // non-nil once open
}

func newBreaker(after, endpoints int, onBreak func(error)) *breaker {
	return &breaker{after: after, eps: endpoints, onBreak: onBreak, failed: map[int]bool{}}
}

// open returns the breaker's error once it is open, else nil.
func (b *breaker) open() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// record counts one attempt's outcome on endpoint ep (e nil: success). It
// returns the breaker's error when this outcome opened it or it was open.
func (b *breaker) record(ep int, e *inference.Error) error {
	if b == nil {
		return nil
	}
	cause := fatalCause(e)
	b.mu.Lock()
	if b.err != nil {
		err := b.err
		b.mu.Unlock()
		return err
	}
	if cause == "" {
		b.streak = 0
		clear(b.failed)
		b.mu.Unlock()
		return nil
	}
	b.streak++
	b.failed[ep] = true
	if b.streak < b.after || len(b.failed) < b.eps {
		b.mu.Unlock()
		return nil
	}
	b.err = &inference.Error{Class: e.Class, Status: e.Status, Msg: fmt.Sprintf(
		"%s: the last %d requests failed on every endpoint: %s; last: %s", ErrBroken, b.streak, cause, e.Msg)}
	err := b.err
	b.mu.Unlock()
	if b.onBreak != nil {
		b.onBreak(err)
	}
	return err
}

// fatalCause names why e is a failure no retry fixes, or "" when it is not
// one (nil, a success).
func fatalCause(e *inference.Error) string {
	if e == nil {
		return ""
	}
	switch e.Status {
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Sprintf("HTTP %d, the API key was refused (check generate.api_key_env)", e.Status)
	case http.StatusNotFound:
		return "HTTP 404, the model or the path is not served (check generate.model and generate.endpoints)"
	}
	if e.Class == inference.ClassConnection {
		switch {
		case strings.Contains(e.Msg, "connection refused"):
			return "connection refused, nothing listens at the endpoint"
		case strings.Contains(e.Msg, "no such host"):
			return "no such host"
		}
	}
	return ""
}

// brokenError is what a request gets while the breaker is open.
func brokenError(err error) error {
	var ie *inference.Error
	if errors.As(err, &ie) {
		c := *ie
		return &c
	}
	return err
}
