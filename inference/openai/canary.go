package openai

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// CanaryHeader is set ("1") on the silence watch's canary requests, so
// that a server, a proxy or a benchmark can tell them from the run's.
const CanaryHeader = "X-Trajflow-Canary"

// canaryRequest is the canary: one token of answer to a one-token
// prompt, on generate.api's protocol (a token-id prompt where the
// protocol sends token ids: tokens, sglang; a chat or text prompt
// otherwise), so that it goes where the run's requests go and through
// the same engine.
func (c *HTTPClient) canaryRequest() *inference.Request {
	req := &inference.Request{
		Model:    c.cfg.Model,
		Messages: []pipeline.Message{{Role: "user", Content: "."}},
		Params:   map[string]any{"max_tokens": 1},
	}
	if c.proto.Caps().Tokens {
		req.PromptTokenIDs = []int32{0}
	}
	return req
}

// canary sends a canary to e and reports whether it got an HTTP answer
// (any status: the endpoint serves requests) and how long that took. It
// is no attempt of the run: it takes no slot, is retried never, and is
// counted in e's canaries alone (EndpointStats.Canaries), not in its
// requests nor in the run's tokens.
func (c *HTTPClient) canary(ctx context.Context, e *endpoint) (bool, time.Duration) {
	call, err := c.proto.Call(c.canaryRequest())
	if err != nil {
		return false, 0
	}
	u := e.base + call.Path
	if call.Root {
		u = e.root + call.Path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(call.Body))
	if err != nil {
		return false, 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set(CanaryHeader, "1")
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	c.fleet.countCanary(e)
	start := time.Now()
	resp, err := c.client.Do(req)
	if err != nil {
		return false, time.Since(start)
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close() // best effort: a response body, read
	return err == nil, time.Since(start)
}

// canaryRound sends r's canary to the suspect and to its peer at once and
// gives the fleet its verdict (canaryVerdict): silent when the peer's
// canary answered and the suspect's has no answer within
// max(canaryWaitFloor, canaryWaitFactor × the peer's time); alive when
// the suspect's answered; none when the peer's did not answer within
// ProbeTimeout (the control failed: nothing to judge by).
func (c *HTTPClient) canaryRound(ctx context.Context, r canaryRound) {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	control := time.NewTimer(c.opts.ProbeTimeout)
	defer control.Stop()
	type result struct {
		ok   bool
		took time.Duration
	}
	sus, ctl := make(chan result, 1), make(chan result, 1)
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		ok, took := c.canary(ctx, r.suspect)
		sus <- result{ok, took}
	}()
	go func() {
		defer c.wg.Done()
		ok, took := c.canary(ctx, r.peer)
		ctl <- result{ok, took}
	}()
	start := time.Now()
	var deadline <-chan time.Time
	var wait, peerTook time.Duration
	for {
		select {
		case s := <-sus:
			if s.ok {
				c.fleet.canaryVerdict(r, false, "", 0)
				return
			}
			sus = nil // failed without an answer: judged at the deadline
		case p := <-ctl:
			ctl = nil
			if !p.ok {
				c.fleet.canaryVerdict(r, false, "", 0)
				return
			}
			control.Stop()
			peerTook = p.took
			wait = max(canaryWaitFloor, canaryWaitFactor*p.took)
			deadline = time.After(wait - time.Since(start))
		case <-deadline:
			c.fleet.canaryVerdict(r, true, fmt.Sprintf("a 1-token canary request had no answer within %s while %s answered the same in %s", wait.Round(time.Millisecond), r.peer.name, peerTook.Round(time.Millisecond)), c.opts.ProbeInterval)
			return
		case <-control.C:
			// The control has no answer either: nothing to judge by.
			c.fleet.canaryVerdict(r, false, "", 0)
			return
		case <-ctx.Done():
			c.fleet.canaryVerdict(r, false, "", 0)
			return
		}
	}
}
