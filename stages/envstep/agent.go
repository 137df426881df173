package envstep

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
)

// Agent returns the environment of r's route when it is an agent
// (envs.Agent): its trajectories are driven by Drive, not stepped.
func (s *Stepper) Agent(r *pipeline.Rollout) (envs.Agent, bool) {
	rt := s.route(r)
	if rt == nil {
		return nil, false
	}
	a, ok := rt.env.(envs.Agent)
	return a, ok
}

// AgentRoute reports whether the rollouts of the route named route (a
// task's Env; any name for a Stepper of one environment) are driven by an
// agent.
func (s *Stepper) AgentRoute(route string) bool {
	_, ok := s.Agent(&pipeline.Rollout{Env: route})
	return ok
}

// MaxTurns is r's max_turns (its route's); 0: none.
func (s *Stepper) MaxTurns(r *pipeline.Rollout) int {
	if rt := s.route(r); rt != nil {
		return rt.limits.MaxTurns
	}
	return 0
}

// Drive runs r's agent with its gateway session (envs.Agent.Run) and
// resolves r with the result: the agent's reward is the last turn's (the
// earlier turns' are 0), its metrics the rollout's. An agent that made no
// model call, or failed, resolves r as an error of the agent's class; a
// rollout already resolved by one of its calls (a failed request, a full
// sequence) keeps that resolution, with the agent's reward where it gave
// one. Drive ends the session before it returns. It returns an error only
// when ctx was cancelled (not at its deadline: that is the agent's
// timeout, an error row).
func (s *Stepper) Drive(ctx context.Context, r *pipeline.Rollout, sess envs.Session) error {
	defer sess.End()
	a, ok := s.Agent(r)
	if !ok {
		r.Fail("env", fmt.Errorf("env %s: not an agent environment", r.Env))
		return nil
	}
	rt := s.route(r)
	if err := rt.acquire(ctx); err != nil {
		return err
	}
	defer rt.release()
	start := time.Now()
	st, err := a.Run(ctx, r, sess)
	sess.End()
	r.EnvTime += time.Since(start)
	var ce *envs.ClassedError
	switch {
	case errors.As(err, &ce):
		r.Fail(ce.Class, fmt.Errorf("env %s: %w", rt.name, err))
		return nil
	case err != nil && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ctx.Err()
	case err != nil && ctx.Err() != nil:
		r.Fail(envs.ClassAgentTimeout, fmt.Errorf("env %s: the agent was still running at the trajectory's timeout: %w", rt.name, err))
		return nil
	case err != nil:
		r.Fail("env", fmt.Errorf("env %s: %w", rt.name, err))
		return nil
	case sess.Calls() == 0:
		r.Fail(envs.ClassAgentNoCall, fmt.Errorf("env %s: the agent ended without calling the model", rt.name))
		return nil
	}
	if st == nil {
		st = &envs.Step{Terminated: true}
	}
	if err := checkStep(st); err != nil {
		r.Fail("env", fmt.Errorf("env %s: %w", rt.name, err))
		return nil
	}
	r.Reward = st.Reward
	r.TurnRewards = make([]float64, max(r.NumTurns, 1))
	r.TurnRewards[len(r.TurnRewards)-1] = st.Reward
	for len(r.Steps) < r.NumTurns {
		r.Steps = append(r.Steps, pipeline.Step{ActionValid: true})
	}
	if n := len(r.Steps); n > 0 {
		r.Steps[n-1].Reward = st.Reward
	}
	addMetrics(r, st.Metrics)
	switch {
	case st.Terminated:
		r.Terminated = true
	case st.Truncated:
		r.Truncated = true
	}
	r.Resolve(pipeline.StatusOK)
	return nil
}
