package envstep_test

import (
	"context"
	"testing"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/envstep"
)

// scriptEnv answers its steps in order and anchors each state.
type scriptEnv struct{ steps []*envs.Step }

func (e *scriptEnv) Reset(context.Context, *pipeline.Rollout) (*envs.Reset, error) {
	a := "s0"
	return &envs.Reset{Anchor: &a}, nil
}

func (e *scriptEnv) Step(_ context.Context, r *pipeline.Rollout, _ pipeline.Message) (*envs.Step, error) {
	return e.steps[r.NumTurns-1], nil
}

// TestInvalidActionPenalty: the penalty is charged to the invalid step
// (Step.Penalty) and to nothing else: turn_rewards, the reward and the
// step's reward stay the environment's, as verl-agent's episode rewards
// do (its penalty is applied to the training scores afterwards). Invalid
// actions are counted and reported as a metric, and each step records the
// anchor of the state its action was taken at.
func TestInvalidActionPenalty(t *testing.T) {
	anchor := func(s string) *string { return &s }
	env := &scriptEnv{steps: []*envs.Step{
		{Reward: 0, ReportsValidity: true, Anchor: anchor("s1")},
		{Reward: 0, InvalidAction: true, Anchor: anchor("s1")},
		{Reward: 1, ReportsValidity: true, Terminated: true},
	}}
	tests := []struct {
		name    string
		penalty float64
		charged []float64
	}{
		{"no penalty", 0, []float64{0, 0, 0}},
		{"penalty", 0.25, []float64{0, 0.25, 0}},
	}
	want := []float64{0, 0, 1}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := envstep.New(env, "script", envstep.Limits{InvalidActionPenalty: tt.penalty})
			r := &pipeline.Rollout{Task: &pipeline.Task{}}
			if err := s.Reset(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			for turn := 1; turn <= 3; turn++ {
				r.NumTurns = turn
				r.Messages = append(r.Messages, pipeline.Message{Role: pipeline.RoleAssistant, Turn: turn})
				if _, err := s.Step(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			if r.InvalidActions != 1 || r.Metrics[envstep.MetricInvalidActions] != 1 {
				t.Fatalf("invalid actions %d, metric %v", r.InvalidActions, r.Metrics)
			}
			sum := 0.0
			for i, w := range want {
				sum += w
				if r.TurnRewards[i] != w || r.Steps[i].Reward != w || r.Steps[i].Penalty != tt.charged[i] {
					t.Fatalf("turn %d: reward %v step %v penalty %v, want %v and %v", i+1, r.TurnRewards[i], r.Steps[i].Reward, r.Steps[i].Penalty, w, tt.charged[i])
				}
				if r.Steps[i].ActionValid != (i != 1) {
					t.Fatalf("step %d valid = %v", i+1, r.Steps[i].ActionValid)
				}
			}
			if r.Reward != sum {
				t.Fatalf("reward %v, want %v", r.Reward, sum)
			}
			wantAnchors := []string{"s0", "s1", "s1"}
			for i, w := range wantAnchors {
				if a := r.Steps[i].Anchor; a == nil || *a != w {
					t.Fatalf("step %d anchor %v, want %q (the state the action was taken at)", i+1, a, w)
				}
			}
		})
	}
}

// TestNoValidityNoMetric: an environment that never judges actions adds
// no invalid_actions metric.
func TestNoValidityNoMetric(t *testing.T) {
	s := envstep.New(&scriptEnv{steps: []*envs.Step{{Terminated: true}}}, "script", envstep.Limits{InvalidActionPenalty: 1})
	r := &pipeline.Rollout{Task: &pipeline.Task{}, NumTurns: 1, Messages: []pipeline.Message{{Role: pipeline.RoleAssistant, Turn: 1}}}
	if _, err := s.Step(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Metrics[envstep.MetricInvalidActions]; ok || r.Reward != 0 {
		t.Fatalf("metrics %v reward %v", r.Metrics, r.Reward)
	}
}

// TestToolCallingSummed: the tool_calling metric is summed over the steps
// (verl-agent's tool_callings += info["tool_calling"]); other metrics keep
// their last value.
func TestToolCallingSummed(t *testing.T) {
	env := &scriptEnv{steps: []*envs.Step{
		{Metrics: map[string]float64{envstep.MetricToolCalling: 2, "acc": 0}},
		{Metrics: map[string]float64{"acc": 0}},
		{Metrics: map[string]float64{envstep.MetricToolCalling: 1, "acc": 1}, Terminated: true},
	}}
	s := envstep.New(env, "script", envstep.Limits{})
	r := &pipeline.Rollout{Task: &pipeline.Task{}}
	if err := s.Reset(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	for turn := 1; turn <= 3; turn++ {
		r.NumTurns = turn
		r.Messages = append(r.Messages, pipeline.Message{Role: pipeline.RoleAssistant, Turn: turn})
		if _, err := s.Step(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if r.Metrics[envstep.MetricToolCalling] != 3 || r.Metrics["acc"] != 1 {
		t.Fatalf("metrics %v, want tool_calling 3 (summed) and acc 1 (the last)", r.Metrics)
	}
}
