package envs

import (
	"context"
	"encoding/json"

	"github.com/trajflow/trajflow/pipeline"
)

// Env is an environment: it starts a trajectory and answers each of the
// model's turns. One Env serves many trajectories at once; per-trajectory
// state lives in Rollout.State (returned by Reset and Step), not in the Env.
type Env interface {
	// Reset starts a trajectory from its task and seed (r.Task, r.Seed).
	Reset(ctx context.Context, r *pipeline.Rollout) (*Reset, error)
	// Step answers the model's last message (the last of r.Messages).
	Step(ctx context.Context, r *pipeline.Rollout, action pipeline.Message) (*Step, error)
}

// Reset is how a trajectory starts.
type Reset struct {
	// Observations are appended to the prompt before the first turn.
	Observations []pipeline.Message
	// Tools are OpenAI function-calling tools sent with every request.
	Tools []json.RawMessage
	// State is the trajectory's state for its first step.
	State any
	// Anchor, when set, is the anchor observation of the first state: the
	// state alone, without history or other text (GiGPO's anchor). Steps of
	// one group taken at equal anchors form an anchor group.
	Anchor *string
}

// Step is the environment's answer to one turn.
type Step struct {
	// Observations are appended as their own messages (user or tool role).
	Observations []pipeline.Message
	Reward       float64
	Terminated   bool
	Truncated    bool
	Metrics      map[string]float64
	// StopStrings, when set, are the stop strings of the next turn.
	StopStrings []string
	// State replaces the trajectory's state for the next turn.
	State any
	// InvalidAction marks the model's action as invalid (verl-agent's
	// is_action_valid = false): the step is charged
	// env.invalid_action_penalty (in its step row's return and episode
	// score, not in the rewards) and the rollout counts it.
	InvalidAction bool
	// ReportsValidity says that the environment judged the action's
	// validity (valid unless InvalidAction); the rollout's
	// invalid_actions metric is written only for rollouts whose
	// environment judged at least one action.
	ReportsValidity bool
	// Anchor, when set, is the anchor observation of the state after this
	// step: the state the next action is taken at (see Reset.Anchor).
	Anchor *string
}

// Ender is an optional interface of an Env with a last word on a
// trajectory that leaves the loop without the environment ending it:
// max_turns reached, or the sequence full. Its Step's reward is added to
// the last turn's, its metrics to the rollout's; an error fails the
// rollout. The nemo_gym environment verifies then, as NeMo Gym's agent
// always does after its loop.
type Ender interface {
	End(ctx context.Context, r *pipeline.Rollout) (*Step, error)
}

// Finisher is an optional interface of an Env with a result for the whole
// run (the nemo_gym environment's /aggregate_metrics). The runner asks it
// once, after the last group, and writes a non-nil result next to
// metrics.json. An error fails the run (as a failed /aggregate_metrics
// fails NeMo Gym's rollout collection) after its rows are committed.
type Finisher interface {
	Finish(ctx context.Context) (json.RawMessage, error)
}
