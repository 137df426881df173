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
