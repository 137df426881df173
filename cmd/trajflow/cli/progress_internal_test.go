package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/runner"
)

func TestViewLines(t *testing.T) {
	s := runner.Snapshot{
		Target: 10, GroupsKept: 4, GroupsFinished: 8, Dropped: map[string]int{"zero_std": 3, "error": 1},
		Errors: 3, ErrorClasses: map[string]int{"timeout": 1, "http": 2},
		Endpoints: []runner.EndpointLoad{
			{Endpoint: "http://a:8000/v1", InFlight: 5, Healthy: true, Server: runner.ServerLoad{OK: true, Running: 61, Waiting: 3, KVCache: 0.71}},
			{Endpoint: "http://b:8000/v1", InFlight: 0, Healthy: false},
		},
	}
	tests := []struct{ got, want string }{
		{groupsLine(s), "groups    kept 4/10 of 8 finished, keep rate 0.50, dropped: zero_std 3, error 1"},
		{endpointLine(s, 0), "endpoint  http://a:8000/v1  in flight 5  server: running 61, waiting 3, KV cache 71%"},
		{endpointLine(s, 1), "endpoint  http://b:8000/v1  in flight 0 (out, probing)"},
		{endpointLine(s, 2), ""},
		{counts(s.ErrorClasses), "http 2, timeout 1"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got  %q\nwant %q", tt.got, tt.want)
		}
	}
}

func TestHostedText(t *testing.T) {
	for _, tt := range []struct {
		h    runner.HostedStats
		want string
	}{
		{runner.HostedStats{}, ""},
		{runner.HostedStats{RateLimitWaiting: 3, RateLimitWait: 90 * time.Second, CacheHits: 5, CacheMisses: 2},
			"   rate limit: 3 waiting, 1m30s of waits summed over requests   cache 5 hits, 2 misses"},
		{runner.HostedStats{Batches: 2, BatchesRecovered: 1, BatchPending: 40}, "   batches 2 submitted, 1 collected from earlier runs, 40 requests waiting"},
	} {
		if got := hostedText(tt.h); got != tt.want {
			t.Errorf("got  %q\nwant %q", got, tt.want)
		}
	}
	if line := ratesLine(runner.Snapshot{Hosted: runner.HostedStats{CacheHits: 1}}); !strings.HasSuffix(line, "cache 1 hits, 0 misses") {
		t.Errorf("rates line %q lacks the cache", line)
	}
}

// The live view's rates line shows the cost and its projection live,
// only with a price.
func TestRatesLineCost(t *testing.T) {
	s := runner.Snapshot{Priced: true, Cost: 0.25, GroupsFinished: 10, GroupsKept: 5, Target: 40, RowsCommitted: 7, ServerTokens: -1}
	if got, want := ratesLine(s), "rows committed 7, cost 0.2500 (projected total 2.0000)"; !strings.HasSuffix(got, want) {
		t.Fatalf("%q, want it to end in %q", got, want)
	}
	s.Priced = false
	if got := ratesLine(s); strings.Contains(got, "cost") {
		t.Fatalf("%q: a cost without a price", got)
	}
}

// A long Retry-After wait, the requests cancelled in flight and the
// servers' own token count are on the view's lines.
func TestViewShowsWaitsAndTokens(t *testing.T) {
	s := runner.Snapshot{
		CompletionTokens: 900, CancelledRequests: 3, CancelledTokensEstimate: 120, ServerTokens: 1030,
		Endpoints: []runner.EndpointLoad{{Endpoint: "http://a:8000/v1", Healthy: true, RetryAfter: 44*time.Second + 600*time.Millisecond}},
	}
	if got := endpointLine(s, 0); !strings.Contains(got, "asked to wait 45s (Retry-After)") {
		t.Errorf("endpoint line %q", got)
	}
	got := ratesLine(s)
	for _, want := range []string{"waiting on Retry-After 45s", "cancelled in flight 3 (~120 tokens)", "tokens 900 (servers' count 1030)"} {
		if !strings.Contains(got, want) {
			t.Errorf("rates line %q lacks %q", got, want)
		}
	}
	s.ServerTokens, s.CancelledRequests, s.Endpoints = -1, 0, nil
	if got := ratesLine(s); strings.Contains(got, "servers' count") || strings.Contains(got, "cancelled") || strings.Contains(got, "Retry-After") {
		t.Errorf("rates line %q", got)
	}
}
