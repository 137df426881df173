package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/envs"
	envsim "github.com/trajflow/trajflow/envs/sim"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
)

// OracleGroup is one task's group (attempt 0) of the full workload.
type OracleGroup struct {
	Task  int64
	Trajs []*Traj
	// Kept is the keep rule's verdict on the group.
	Kept bool
}

// Oracle replays the whole workload once, outside any measured run, to
// learn what every trajectory costs: the same requests (trajflow's own
// template, repeat, generate and envstep code) against an in-process
// simulator with the same seed and options, except that a batch step takes
// a nanosecond and the environment does not sleep. The simulator's replies
// depend only on (seed, messages, request seed), so the oracle sees exactly
// the tokens and trailer delays the measured runs meet.
func Oracle(ctx context.Context, b Bench, w Workload, cfg *config.Config, tasks []*pipeline.Task) ([]OracleGroup, error) {
	o := b.SimOptions(w)
	o.A, o.C, o.P = time.Nanosecond, time.Nanosecond, time.Nanosecond
	s := sim.New(o)
	defer s.Close()
	rec := NewRecorder(s)
	ref := NewBarrier(cfg, rec, quickEnv{})
	kept := map[int64]bool{}
	per := max(1024/max(w.N, 1), 1)
	for lo := 0; lo < len(tasks); lo += per {
		gs, err := ref.Groups(ctx, tasks[lo:min(lo+per, len(tasks))])
		if err != nil {
			return nil, err
		}
		for _, g := range gs {
			for _, r := range g.Rollouts {
				if r.Status != pipeline.StatusOK && r.Status != pipeline.StatusFiltered {
					return nil, fmt.Errorf("oracle: %s: %s %s", r, r.Status, r.Error)
				}
			}
			kept[g.Key.TaskIndex] = g.Kept
		}
	}
	byTask := map[int64]*OracleGroup{}
	var out []OracleGroup
	for _, t := range tasks {
		out = append(out, OracleGroup{Task: t.Index, Kept: kept[t.Index]})
	}
	for i := range out {
		byTask[out[i].Task] = &out[i]
	}
	for _, t := range rec.Trajs() {
		if g := byTask[t.TaskIndex]; g != nil {
			g.Trajs = append(g.Trajs, t)
		}
	}
	return out, nil
}

// AllTrajs flattens groups' trajectories.
func AllTrajs(gs []OracleGroup) []*Traj {
	var out []*Traj
	for _, g := range gs {
		out = append(out, g.Trajs...)
	}
	return out
}

// Prefix returns the shortest in-order prefix of gs holding target kept
// groups, and false when gs holds fewer.
func Prefix(gs []OracleGroup, target int) ([]OracleGroup, bool) {
	kept := 0
	for i, g := range gs {
		if g.Kept {
			kept++
			if kept == target {
				return gs[:i+1], true
			}
		}
	}
	return gs, false
}

// quickEnv is the sim environment without its sleep: the same
// observations, rewards and termination.
type quickEnv struct{}

func (quickEnv) Reset(ctx context.Context, r *pipeline.Rollout) (*envs.Reset, error) {
	return &envs.Reset{}, nil
}

func (quickEnv) Step(ctx context.Context, r *pipeline.Rollout, action pipeline.Message) (*envs.Step, error) {
	tr, err := envsim.ReadTrailer(r.Extra)
	if err != nil {
		return nil, err
	}
	if tr.TurnsLeft > 0 {
		return &envs.Step{Observations: []pipeline.Message{{
			Role: pipeline.RoleUser, Content: envsim.Observation(tr.ObsTokens), Turn: action.Turn,
		}}}, nil
	}
	acc := 0.0
	if tr.Correct {
		acc = 1
	}
	return &envs.Step{Reward: acc, Terminated: true, Metrics: map[string]float64{"acc": acc}}, nil
}

// SimEnv is trajflow's sim environment (it sleeps the trailer's delay).
func SimEnv() (envs.Env, error) {
	return envs.New(envsim.Name, envs.Options{Section: "env"})
}
