package envstep

import (
	"context"
	"fmt"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
)

// Limits end trajectories.
type Limits struct {
	// MaxTurns bounds the model turns of a trajectory; 0: no bound (the
	// environment, max_seq_len or the trajectory timeout ends it).
	MaxTurns int
	// TurnTimeout bounds one environment call; 0: none.
	TurnTimeout time.Duration
	// Timeout bounds one trajectory from admission (the loop applies it,
	// through Stepper.Timeout); 0: none.
	Timeout time.Duration
	// InvalidActionPenalty is charged to a step whose action the
	// environment marked invalid (pipeline.Step.Penalty; verl-agent's
	// invalid_action_penalty_coef); 0: none.
	InvalidActionPenalty float64
}

// Route is one environment of a routed Stepper: the rollouts whose Env is
// Name go to Env, under Limits, with at most Concurrency calls in flight
// (0: no bound of its own).
type Route struct {
	Name        string
	Env         envs.Env
	Limits      Limits
	Concurrency int
}

// Stepper drives the run's environments: one, or one per route.
type Stepper struct {
	routes map[string]*route
	// single is the only environment of a Stepper built by New: every
	// rollout goes to it, whatever its Env.
	single *route
}

type route struct {
	env    envs.Env
	name   string
	limits Limits
	sem    chan struct{} // nil: no bound of its own
}

// New returns a Stepper for env (named name in the output).
func New(env envs.Env, name string, limits Limits) *Stepper {
	limits.MaxTurns = max(limits.MaxTurns, 0)
	return &Stepper{single: &route{env: env, name: name, limits: limits}}
}

// NewRouted returns a Stepper that steps each rollout with the route its
// Env names (pipeline.Rollout.Env, from its task's route). A rollout
// whose Env names no route resolves as an error.
func NewRouted(routes []Route) *Stepper {
	s := &Stepper{routes: make(map[string]*route, len(routes))}
	for _, r := range routes {
		r.Limits.MaxTurns = max(r.Limits.MaxTurns, 0)
		rt := &route{env: r.Env, name: r.Name, limits: r.Limits}
		if r.Concurrency > 0 {
			rt.sem = make(chan struct{}, r.Concurrency)
		}
		s.routes[r.Name] = rt
	}
	return s
}

// route returns r's route, nil when it names none.
func (s *Stepper) route(r *pipeline.Rollout) *route {
	if s.single != nil {
		return s.single
	}
	return s.routes[r.Env]
}

// Timeout is r's trajectory timeout (its route's); 0: none.
func (s *Stepper) Timeout(r *pipeline.Rollout) time.Duration {
	if rt := s.route(r); rt != nil {
		return rt.limits.Timeout
	}
	return 0
}

// acquire takes one of the route's call slots.
func (rt *route) acquire(ctx context.Context) error {
	if rt.sem == nil {
		return nil
	}
	select {
	case rt.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (rt *route) release() {
	if rt.sem != nil {
		<-rt.sem
	}
}

// Reset starts r's trajectory. A failing environment resolves r as an
// error; Reset returns an error only when ctx is done.
func (s *Stepper) Reset(ctx context.Context, r *pipeline.Rollout) error {
	rt := s.route(r)
	if rt == nil {
		r.Fail("env", fmt.Errorf("env: no route %q", r.Env))
		return nil
	}
	return rt.reset(ctx, r)
}

func (s *route) reset(ctx context.Context, r *pipeline.Rollout) error {
	r.Env = s.name
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	if r.Tools == nil {
		r.Tools = r.Task.Tools
	}
	cctx, cancel := s.turnContext(ctx)
	start := time.Now()
	res, err := s.env.Reset(cctx, r)
	cancel()
	r.EnvTime += time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.Fail("env", fmt.Errorf("env %s reset: %w", s.name, err))
		return nil
	}
	if res == nil {
		return nil
	}
	for _, m := range res.Observations {
		m.Turn = 0
		r.Messages = append(r.Messages, m)
	}
	if res.Tools != nil {
		r.Tools = append(r.Tools, res.Tools...)
	}
	r.State = res.State
	r.Anchor = res.Anchor
	return nil
}

// MetricToolCalling is the step metric an environment reports the tool
// calls of a step under (verl-agent's info["tool_calling"]): unlike other
// metrics, whose last value stands, it is summed over the trajectory's
// steps, as verl-agent's collector sums it into tool_callings.
const MetricToolCalling = "tool_calling"

// addMetrics records a step's metrics on r: the last value of each, but
// tool_calling summed.
func addMetrics(r *pipeline.Rollout, m map[string]float64) {
	for k, v := range m {
		if k == MetricToolCalling {
			v += r.Metrics[k]
		}
		r.AddMetric(k, v)
	}
}

// MetricInvalidActions is the metric counting a rollout's actions its
// environment marked invalid; a rollout has it when its environment judged
// the validity of at least one action.
const MetricInvalidActions = "invalid_actions"

// Step answers r's last assistant message. It appends the observations
// (their text whole: max_seq_len cuts token ids, in the generate stage),
// adds the reward, and resolves r as ok when the trajectory ends (the
// environment terminated or truncated it, the generate stage found the
// sequence full, or max_turns was reached). Stop strings the environment
// returns apply from the next turn on until it returns others. Done
// reports whether r left the loop. Step returns an error only when ctx is
// done.
func (s *Stepper) Step(ctx context.Context, r *pipeline.Rollout) (done bool, err error) {
	if r.Done() {
		return true, nil
	}
	rt := s.route(r)
	if rt == nil {
		r.Fail("env", fmt.Errorf("env: no route %q", r.Env))
		return true, nil
	}
	if err := rt.acquire(ctx); err != nil {
		return false, err
	}
	defer rt.release()
	return rt.step(ctx, r)
}

func (s *route) step(ctx context.Context, r *pipeline.Rollout) (done bool, err error) {
	action := r.Messages[len(r.Messages)-1]
	cctx, cancel := s.turnContext(ctx)
	start := time.Now()
	st, err := s.env.Step(cctx, r, action)
	cancel()
	r.EnvTime += time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		r.Fail("env", fmt.Errorf("env %s step (turn %d): %w", s.name, r.NumTurns, err))
		return true, nil
	}
	if st == nil {
		st = &envs.Step{Terminated: true}
	}
	if err := checkStep(st); err != nil {
		r.Fail("env", fmt.Errorf("env %s step (turn %d): %w", s.name, r.NumTurns, err))
		return true, nil
	}
	// The environment's reward is the episode's and the step's as it
	// stands; an invalid action's penalty is charged to the step's
	// training signal only (Step.Penalty, taken off its return after the
	// returns are computed), as verl-agent's apply_invalid_action_penalty
	// does, so that the keep rule sees the rewards the environment gave.
	reward := st.Reward
	penalty := 0.0
	if st.InvalidAction {
		penalty = s.limits.InvalidActionPenalty
		r.InvalidActions++
	}
	if st.InvalidAction || st.ReportsValidity {
		r.AddMetric(MetricInvalidActions, float64(r.InvalidActions))
	}
	r.Reward += reward
	r.TurnRewards = append(r.TurnRewards, reward)
	for len(r.Steps) < r.NumTurns {
		// A step the generate stage did not record (no generator keeps
		// steps for r): its anchor is the state's.
		r.Steps = append(r.Steps, pipeline.Step{ActionValid: true, Anchor: r.Anchor})
	}
	if n := len(r.Steps); n > 0 {
		last := &r.Steps[n-1]
		last.Reward = reward
		last.Penalty = penalty
		last.ActionValid = !st.InvalidAction
	}
	r.Anchor = st.Anchor
	addMetrics(r, st.Metrics)
	r.State = st.State
	if st.StopStrings != nil {
		// NeMo RL's async loop: stop strings carry forward until the
		// environment changes them (an empty, non-nil list clears them).
		r.StopStrings = st.StopStrings
	}
	switch {
	case st.Terminated:
		r.Terminated = true
	case st.Truncated:
		r.Truncated = true
	}
	if s.limits.MaxTurns > 0 && r.NumTurns >= s.limits.MaxTurns {
		// NeMo RL's async loop: a sample that took its last allowed turn
		// reached max turns, whether or not that turn also ended it.
		r.MaxTurnsReached = true
	}
	for _, m := range st.Observations {
		m.Turn = r.NumTurns
		r.Messages = append(r.Messages, m)
	}
	if r.Terminated || r.Truncated || r.MaxTurnsReached {
		if !r.Terminated {
			if err := s.end(ctx, r); err != nil {
				return false, err
			}
		}
		r.Resolve(pipeline.StatusOK)
		return true, nil
	}
	return false, nil
}

// end gives an envs.Ender its last word on a trajectory the environment
// did not end. It returns an error only when ctx is done.
func (s *route) end(ctx context.Context, r *pipeline.Rollout) error {
	e, ok := s.env.(envs.Ender)
	if !ok {
		return nil
	}
	cctx, cancel := s.turnContext(ctx)
	start := time.Now()
	st, err := e.End(cctx, r)
	cancel()
	r.EnvTime += time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.Fail("env", fmt.Errorf("env %s end (turn %d): %w", s.name, r.NumTurns, err))
		return nil
	}
	if st == nil {
		return nil
	}
	if err := checkStep(st); err != nil {
		r.Fail("env", fmt.Errorf("env %s end (turn %d): %w", s.name, r.NumTurns, err))
		return nil
	}
	r.Reward += st.Reward
	if n := len(r.TurnRewards); n > 0 {
		r.TurnRewards[n-1] += st.Reward
	} else {
		r.TurnRewards = append(r.TurnRewards, st.Reward)
	}
	if n := len(r.Steps); n > 0 {
		r.Steps[n-1].Reward += st.Reward
	}
	addMetrics(r, st.Metrics)
	r.State = st.State
	return nil
}

func (s *route) turnContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.limits.TurnTimeout > 0 {
		return context.WithTimeout(ctx, s.limits.TurnTimeout)
	}
	return ctx, func() {}
}
