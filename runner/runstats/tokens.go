package runstats

import (
	"context"
	"time"

	"github.com/trajflow/trajflow/runner/metrics"
)

// serverCount is the endpoints' own generation-token counter over the
// run: polled at its start and at its end (vLLM's, and trajflow
// sim-server's, vllm:generation_tokens_total).
type serverCount struct {
	start float64
	ok    bool
	// generated is the counter's growth over the run; known is false when
	// an endpoint reports no counter.
	generated int64
	known     bool
}

// ServerBaseline reads the endpoints' counters before the first request.
func (r *Tracker) ServerBaseline(ctx context.Context) {
	if r.scraper == nil {
		return
	}
	// Bounded whatever the fleet: an endpoint slow to answer counts none.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	r.scraper.poll(ctx)
	start, ok := r.scraper.generated()
	r.lifeMu.Lock()
	r.srv.start, r.srv.ok = start, ok
	r.lifeMu.Unlock()
}

// ServerFinal reads the endpoints' counters after the last request, once
// they hold no request (a cancelled request leaves the server a moment
// after the client gives it up), waiting at most a couple of seconds.
func (r *Tracker) ServerFinal(ctx context.Context) {
	srv := r.server()
	if r.scraper == nil || !srv.ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	deadline := time.Now().Add(2 * time.Second)
	for {
		r.scraper.poll(ctx)
		busy := false
		for i := range r.scraper.urls {
			if l := r.scraper.load(i); l.Running+l.Waiting > 0 {
				busy = true
			}
		}
		if !busy || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if end, ok := r.scraper.generated(); ok && end >= srv.start {
		r.lifeMu.Lock()
		r.srv.generated, r.srv.known = int64(end-srv.start), true
		r.lifeMu.Unlock()
	}
}

// server is srv, read under lifeMu.
func (r *Tracker) server() serverCount {
	r.lifeMu.Lock()
	defer r.lifeMu.Unlock()
	return r.srv
}

// runTokens are the run's token figures for metrics.json, from its
// snapshot but for the endpoints' own count (ServerFinal's).
func (r *Tracker) runTokens() *metrics.RunTokens {
	s := r.Snapshot()
	t := &metrics.RunTokens{CompletionTokens: s.CompletionTokens, CancelledRequests: s.CancelledRequests, CancelledTokensEstimate: s.CancelledTokensEstimate}
	if srv := r.server(); srv.known {
		t.ServerTokens = &srv.generated
	}
	for _, e := range s.Endpoints {
		t.Endpoints = append(t.Endpoints, metrics.EndpointCounts{Endpoint: e.Endpoint, Requests: e.Requests, Retries: e.Retries, Failures: e.Failures, Moved: e.Moved, Canaries: e.Canaries})
	}
	return t
}
