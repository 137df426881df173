package envs

import (
	"context"

	"github.com/trajflow/trajflow/pipeline"
)

// Agent is an environment whose trajectories an agent drives: a program
// trajflow did not write, which calls the model itself through a gateway
// session (OpenAI Chat Completions, the Responses API or Anthropic
// Messages) rather than being stepped turn by turn. The loop opens a
// session for each rollout, calls Run, and ends the session when Run
// returns; every model call made through the session is one turn of the
// rollout (its messages, token ids and loss mask are recorded as for any
// turn).
//
// While the session is open its calls write r's trajectory: Run reads
// only r.Task and the rollout's identity (indices, seed) until it has
// called s.End, which refuses further calls and waits for those in
// flight; after it, r.Messages hold every call's messages and answers (a
// verifying environment reads the final answer there).
//
// Run returns when the agent finished. Its Step holds the reward (and
// metrics) of the whole trajectory. An error fails the rollout, with the
// class of a *ClassedError in its chain, else "env". ctx ends at
// the trajectory's deadline (env.timeout) or when the rollout is
// cancelled: Run must then stop the agent and return. A rollout whose
// agent made no model call is an error row: the loop checks that, not
// Run.
type Agent interface {
	Env
	Run(ctx context.Context, r *pipeline.Rollout, s Session) (*Step, error)
}

// FixedGateway is an optional interface of an Agent whose agents are
// configured with the gateway's address before the run (NeMo Gym agent
// servers name their model server in their own config): the gateway must
// then listen on a fixed port (gateway.addr with a port other than 0).
type FixedGateway interface {
	FixedGateway() bool
}

// Session is a rollout's gateway session: where an unmodified SDK sends
// its calls, and the key it proves itself with.
type Session struct {
	// ID names the session (TRAJFLOW_SESSION).
	ID string
	// Key is the session's unguessable API key (OPENAI_API_KEY,
	// ANTHROPIC_API_KEY).
	Key string
	// OpenAIBaseURL is the base URL an OpenAI SDK takes
	// (OPENAI_BASE_URL: ".../v1").
	OpenAIBaseURL string
	// AnthropicBaseURL is the base URL the Anthropic SDK takes
	// (ANTHROPIC_BASE_URL: its paths start with /v1).
	AnthropicBaseURL string
	// RewardURL is where the agent may POST {"reward": x} instead of
	// printing it (TRAJFLOW_REWARD_URL).
	RewardURL string
	// Reward returns the reward posted to RewardURL; ok is false when
	// none was.
	Reward func() (reward float64, ok bool)
	// Calls returns how many model calls the session has answered.
	Calls func() int
	// End ends the session: later calls are refused (404), and End
	// returns once the calls in flight have returned. Calling it again
	// does nothing.
	End func()
}

// Error classes of agent rollouts (the error_class column).
const (
	// ClassAgentCrash: the agent exited with a failure status or could
	// not be started.
	ClassAgentCrash = "agent_crash"
	// ClassAgentTimeout: the agent was still running at env.timeout and
	// was killed.
	ClassAgentTimeout = "agent_timeout"
	// ClassAgentNoCall: the agent ended without calling the model.
	ClassAgentNoCall = "agent_no_call"
	// ClassAgentReward: the agent ended without a reward it could be
	// scored by (its last stdout line is not a reward, none was posted,
	// the verifier had no answer to score).
	ClassAgentReward = "agent_reward"
)

// ClassedError is an error with its error class (the error_class column).
type ClassedError struct {
	Class string
	Err   error
}

func (e *ClassedError) Error() string { return e.Err.Error() }
func (e *ClassedError) Unwrap() error { return e.Err }
