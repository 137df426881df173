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
}

// Stepper drives one environment.
type Stepper struct {
	env    envs.Env
	name   string
	limits Limits
}

// New returns a Stepper for env (named name in the output).
func New(env envs.Env, name string, limits Limits) *Stepper {
	limits.MaxTurns = max(limits.MaxTurns, 0)
	return &Stepper{env: env, name: name, limits: limits}
}

// Reset starts r's trajectory. A failing environment resolves r as an
// error; Reset returns an error only when ctx is done.
func (s *Stepper) Reset(ctx context.Context, r *pipeline.Rollout) error {
	r.Env = s.name
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
	return nil
}

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
	r.Reward += st.Reward
	r.TurnRewards = append(r.TurnRewards, st.Reward)
	for k, v := range st.Metrics {
		r.AddMetric(k, v)
	}
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
	case r.Truncated:
		// The generate stage found the sequence full.
	case s.limits.MaxTurns > 0 && r.NumTurns >= s.limits.MaxTurns:
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
func (s *Stepper) end(ctx context.Context, r *pipeline.Rollout) error {
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
	r.Reward += st.Reward
	if n := len(r.TurnRewards); n > 0 {
		r.TurnRewards[n-1] += st.Reward
	} else {
		r.TurnRewards = append(r.TurnRewards, st.Reward)
	}
	for k, v := range st.Metrics {
		r.AddMetric(k, v)
	}
	r.State = st.State
	return nil
}

func (s *Stepper) turnContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.limits.TurnTimeout > 0 {
		return context.WithTimeout(ctx, s.limits.TurnTimeout)
	}
	return ctx, func() {}
}
