package report

import (
	"testing"

	"github.com/trajflow/trajflow/runner/metrics"
)

// The prompt-tokens chart's note gives the environment tokens of the rows
// whose counts are known, and says how many rows had none (no token ids)
// rather than a mean of 0.
func TestEnvTokensNote(t *testing.T) {
	tests := []struct {
		name string
		m    metrics.Metrics
		want string
	}{
		{"known", metrics.Metrics{Rows: 4, Tokens: metrics.Tokens{Env: &metrics.Dist{Mean: 2.5, Max: 4}}},
			"Environment tokens: mean 2.5, max 4."},
		{"unknown", metrics.Metrics{Rows: 8, NeMoRL: metrics.NeMoRL{TokenCountsUnknown: 8}},
			"Environment tokens: unknown (8 of 8 rows unknown: no token ids)."},
		{"mixed", metrics.Metrics{Rows: 8, Tokens: metrics.Tokens{Env: &metrics.Dist{Mean: 3, Max: 5}}, NeMoRL: metrics.NeMoRL{TokenCountsUnknown: 2}},
			"Environment tokens: mean 3.0, max 5 (2 of 8 rows unknown: no token ids)."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := envTokensNote(&tt.m); got != tt.want {
				t.Errorf("envTokensNote = %q, want %q", got, tt.want)
			}
		})
	}
}
