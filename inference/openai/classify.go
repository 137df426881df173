package openai

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/trajflow/trajflow/inference"
)

// classify decodes a 2xx body, or classifies the status of any other
// answer: the attempt's error, naming the URL requested (where: a 502 of
// /v1/chat/completions is not one of /v1), and the server's Retry-After.
func (c *HTTPClient) classify(ep *endpoint, where string, hresp *http.Response, data []byte, decode func([]byte, http.Header) error) (*inference.Error, time.Duration) {
	st := hresp.StatusCode
	fail := func(class, at string) *inference.Error {
		return &inference.Error{Class: class, Status: st, Msg: fmt.Sprintf("%s: %s", at, serverMessage(data))}
	}
	retryAfter := func() time.Duration { return c.retryAfter(hresp.Header.Get("Retry-After")) }
	switch {
	case st >= 200 && st < 300:
		if err := decode(data, hresp.Header); err != nil {
			return &inference.Error{Class: inference.ClassBadResponse, Status: st, Msg: fmt.Sprintf("%s: %v", where, err)}, 0
		}
		return nil, 0
	case st == http.StatusTooManyRequests:
		return fail(inference.ClassRateLimited, where), retryAfter()
	case st >= 500:
		return fail(inference.ClassServer, where), retryAfter()
	case st == http.StatusRequestTimeout:
		return fail(inference.ClassTimeout, where), retryAfter()
	case st >= 300 && st < 400:
		return &inference.Error{Class: inference.ClassHTTP, Status: st, Msg: redirectMessage(where, st, hresp.Header.Get("Location"))}, 0
	case (st == http.StatusBadRequest || st == http.StatusRequestEntityTooLarge || st == http.StatusUnprocessableEntity) && isContextLength(data):
		return fail(inference.ClassContextLength, where), 0
	default:
		return fail(inference.ClassHTTP, where), 0
	}
}

// transportError classifies an error of Do or of reading the body.
func (c *HTTPClient) transportError(ctx context.Context, ep *endpoint, err error) *inference.Error {
	msg := fmt.Sprintf("%s: %v", ep.name, stripURL(err))
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return &inference.Error{Class: inference.ClassTimeout, Msg: fmt.Sprintf("%s: no answer within generate.timeout (%s)", ep.name, c.cfg.Timeout.D())}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &inference.Error{Class: inference.ClassTimeout, Msg: msg}
	}
	// Refused, reset, EOF, DNS and every other transport failure.
	return &inference.Error{Class: inference.ClassConnection, Msg: msg}
}

// stripURL drops the *url.Error wrapper (the endpoint is already named).
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
