package runner_test

import (
	"slices"
	"testing"

	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
)

// TestRoutedExpertsRun: a run with generate.routed_experts against the
// simulator's MoE model writes every row's routes, read back from the
// Parquet files as the router sent them, in tokens and sglang modes; a
// dense model's rows have none (null).
func TestRoutedExpertsRun(t *testing.T) {
	moe := sim.MoE{Layers: 2, Experts: 16, TopK: 2}
	for _, tt := range []struct {
		api   string
		dense bool
	}{{"tokens", false}, {"sglang", false}, {"tokens", true}} {
		name := tt.api
		if tt.dense {
			name += "/dense"
		}
		t.Run(name, func(t *testing.T) {
			sets := []string{"source.limit=4", "generate.api=" + tt.api, "generate.routed_experts=true", "generate.routed_experts_layers=2", "generate.sim.seed=5"}
			if !tt.dense {
				sets = append(sets, "generate.sim.moe.layers=2", "generate.sim.moe.experts=16", "generate.sim.moe.top_k=2")
			}
			cfg := quickstart(t, sets...)
			if _, err := run(t, cfg, runner.Options{}); err != nil {
				t.Fatal(err)
			}
			rows := readBack(t, cfg.Output.Dir, schema.DataDir)
			if len(rows) == 0 {
				t.Fatal("no rows")
			}
			for _, r := range rows {
				if r.Status != pipeline.StatusOK {
					t.Fatalf("%s: %s %s", r, r.Status, r.Error)
				}
				if tt.dense {
					if r.Routes != nil {
						t.Fatalf("%s: routes from a dense model", r)
					}
					continue
				}
				seq := r.Tokens()
				if r.Routes == nil || r.Routes.Positions() != len(seq) {
					t.Fatalf("%s: routes %+v over %d positions", r, r.Routes, len(seq))
				}
				for p := range seq {
					want := moe.Route(nil, 5, p, seq[p])
					if p == len(seq)-1 {
						if r.Routes.Routed(p) {
							t.Fatalf("%s: the last token is routed", r)
						}
						continue
					}
					if !slices.Equal(r.Routes.At(p), want) {
						t.Fatalf("%s: position %d: %v, the router's %v", r, p, r.Routes.At(p), want)
					}
				}
			}
		})
	}
}
