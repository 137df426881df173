package openai

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/trajflow/trajflow/inference"
)

var _ inference.Aborter = (*HTTPClient)(nil)

// Abort asks the endpoints to abort this client's requests in flight, as
// generate.api's protocol says (Protocol.AbortBodies): SGLang's POST
// {root}/abort_request {"abort_all": true} on every endpoint (the
// simulator has it too), or, under generate.api: sglang, {"rid": rid} for
// each of this client's requests on the endpoint it went to. Each aborted
// request answers with the tokens it generated so far and finish_reason
// "abort". The calls go at once (at most abortParallel); the error names
// each that did not answer with a 2xx (vLLM has no such call: its
// requests must be cancelled by the client).
func (c *HTTPClient) Abort(ctx context.Context) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	c.fleet.mu.Lock()
	eps := slices.Clone(c.fleet.eps)
	c.fleet.mu.Unlock()
	inflight := c.ids.byEndpoint()
	sem := make(chan struct{}, abortParallel)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, ep := range eps {
		for _, body := range c.proto.AbortBodies(inflight[ep]) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				if err := c.postAbort(ctx, ep, body); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// abortParallel bounds the POST /abort_request calls of one Abort in
// flight at once.
const abortParallel = 16

// postAbort sends body to e's POST /abort_request.
func (c *HTTPClient) postAbort(ctx context.Context, e *endpoint, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.root+"/abort_request", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: POST /abort_request: %w", e.name, stripURL(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // best effort: drained for the connection's reuse
	_ = resp.Body.Close()                                        // best effort: a response body, read
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s: POST /abort_request: HTTP %d", e.name, resp.StatusCode)
	}
	return nil
}

// idSet are the ids (Call.ID: SGLang's rids) of the requests in flight,
// with the endpoint each was last sent to.
type idSet struct {
	mu sync.Mutex
	m  map[string]*endpoint
}

func (s *idSet) sent(id string, ep *endpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*endpoint{}
	}
	s.m[id] = ep
}

func (s *idSet) done(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// byEndpoint returns the ids in flight grouped by endpoint.
func (s *idSet) byEndpoint() map[*endpoint][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[*endpoint][]string{}
	for id, ep := range s.m {
		out[ep] = append(out[ep], id)
	}
	return out
}
