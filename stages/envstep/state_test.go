package envstep_test

import (
	"context"
	"testing"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/envstep"
)

// TestGoEnvStateReplaces: a Go environment's Step.State replaces the
// trajectory's state, nil included (a Go environment that keeps its state
// returns r.State); the subprocess and HTTP protocols keep it when a
// response leaves state out (TestStateKeptLikeNeMoRLMetadata).
func TestGoEnvStateReplaces(t *testing.T) {
	for _, tc := range []struct {
		state any
		want  any
	}{{"s1", "s1"}, {nil, nil}} {
		s := envstep.New(fixedEnv{step: &envs.Step{Observations: []pipeline.Message{{Role: "user", Content: "o"}}, State: tc.state}}, "fixed", envstep.Limits{MaxTurns: 3})
		r := after(0, "a")
		if err := s.Reset(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		r.NumTurns = 1
		if _, err := s.Step(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if r.State != tc.want {
			t.Fatalf("step state %v: trajectory state %v, want %v", tc.state, r.State, tc.want)
		}
	}
}
