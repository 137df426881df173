package runstats

import (
	"context"
	"testing"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
)

type plainEnv struct{}

func (plainEnv) Reset(context.Context, *pipeline.Rollout) (*envs.Reset, error) { return nil, nil }
func (plainEnv) Step(context.Context, *pipeline.Rollout, pipeline.Message) (*envs.Step, error) {
	return nil, nil
}

type enderEnv struct{ plainEnv }

func (enderEnv) End(context.Context, *pipeline.Rollout) (*envs.Step, error) {
	return &envs.Step{Reward: 2}, nil
}

type agentEnv struct{ plainEnv }

func (agentEnv) Run(context.Context, *pipeline.Rollout, envs.Session) (*envs.Step, error) {
	return nil, nil
}

// TestWrapEnvKeepsWhatTheEnvCan: timing an environment's calls for
// Prometheus keeps an Ender's last word (its End is still called) and
// leaves an agent as it is (it is driven, not stepped).
func TestWrapEnvKeepsWhatTheEnvCan(t *testing.T) {
	tr := &Tracker{prom: newPrometheus(func() Snapshot { return Snapshot{} })}
	e, ok := tr.WrapEnv(enderEnv{}).(envs.Ender)
	if !ok {
		t.Fatal("the timed Ender lost End")
	}
	if st, err := e.End(context.Background(), nil); err != nil || st.Reward != 2 {
		t.Fatalf("End: %v %v", st, err)
	}
	if _, ok := tr.WrapEnv(agentEnv{}).(envs.Agent); !ok {
		t.Fatal("the agent was wrapped")
	}
	if _, ok := tr.WrapEnv(plainEnv{}).(TimedEnv); !ok {
		t.Fatal("a plain environment was not timed")
	}
}
