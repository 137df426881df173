package runner

import (
	"testing"

	"github.com/trajflow/trajflow/config"
)

// A continuous run (trajflow serve) keeps as many groups in flight as a
// run without a target, 2 × (generate + env concurrency) ÷ n + 1, so the
// generation slots stay busy while a group's last members finish; a run
// with a target keeps no more than the generation slots serve at once;
// groups.max_inflight sets both.
func TestMaxInflight(t *testing.T) {
	tests := []struct {
		name       string
		target     int
		maxInfl    int
		continuous bool
		want       int
	}{
		{name: "continuous", continuous: true, want: 2*(64+64)/8 + 1},
		{name: "continuous with a target set", target: 5, continuous: true, want: 2*(64+64)/8 + 1},
		{name: "a target", target: 5, want: 64 / 8},
		{name: "no target", want: 2*(64+64)/8 + 1},
		{name: "groups.max_inflight", continuous: true, maxInfl: 3, want: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &config.Config{}
			cfg.Repeat.N = 8
			cfg.Generate.Concurrency = 64
			cfg.Env.Concurrency = 64
			cfg.Groups.Target, cfg.Groups.MaxInflight = tt.target, tt.maxInfl
			if got := maxInflight(cfg, tt.continuous); got != tt.want {
				t.Fatalf("maxInflight = %d, want %d", got, tt.want)
			}
		})
	}
}
