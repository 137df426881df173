package cli

import (
	"strings"
	"testing"

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

// The live view's rates line shows the cost and its projection live,
// only with a price.
func TestRatesLineCost(t *testing.T) {
	s := runner.Snapshot{Priced: true, Cost: 0.25, GroupsFinished: 10, GroupsKept: 5, Target: 40, RowsCommitted: 7}
	if got, want := ratesLine(s), "rows committed 7, cost 0.2500 (projected total 2.0000)"; !strings.HasSuffix(got, want) {
		t.Fatalf("%q, want it to end in %q", got, want)
	}
	s.Priced = false
	if got := ratesLine(s); strings.Contains(got, "cost") {
		t.Fatalf("%q: a cost without a price", got)
	}
}
