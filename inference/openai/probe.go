package openai

import (
	"context"
	"io"
	"net/http"
	"time"
)

// probeLoop puts endpoints that are out back in when they answer.
func (c *HTTPClient) probeLoop(ctx context.Context) {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, e := range c.fleet.unhealthy() {
			if ctx.Err() != nil {
				return
			}
			if c.fleet.isSilent(e) {
				// A hung engine still answers GET /models: a silent
				// endpoint is back in when it answers a canary.
				if ok, _ := c.canaryProbe(ctx, e); ok {
					c.fleet.markHealthy(e, "a canary request answered")
				}
				continue
			}
			if c.probe(ctx, e) {
				c.fleet.markHealthy(e, "probe answered")
			}
		}
	}
}

// probe reports whether e answers GET {base}/models or GET {root}/health
// with a 2xx.
func (c *HTTPClient) probe(ctx context.Context, e *endpoint) bool {
	for _, u := range []string{e.base + "/models", e.root + "/health"} {
		if c.get(ctx, u) {
			return true
		}
	}
	return false
}

func (c *HTTPClient) get(ctx context.Context, u string) bool {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false
	}
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // best effort: a response body, read
	_ = resp.Body.Close()                                        // best effort: a response body, read
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

// canaryProbe is a canary to e within ProbeTimeout.
func (c *HTTPClient) canaryProbe(ctx context.Context, e *endpoint) (bool, time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ProbeTimeout)
	defer cancel()
	return c.canary(ctx, e)
}
