package runner

import (
	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/groups"
)

// newController is the run's dynamic-sampling controller: groups.target's,
// or, for a continuous run (Continuous.Supply), one that follows the supply's
// demand with the generation slots kept full.
func (r *run) newController() *groups.Controller {
	cfg := r.cfg
	ctl := groups.NewController(cfg.Groups, maxInflight(cfg, r.opts.continuous().Supply != nil), r.done.Kept, func() {
		if cfg.Groups.OnTarget == "cancel" {
			// The groups furthest from done first, then everything
			// left (and everything still to come).
			for _, k := range r.flow.ctl.CancelOrder() {
				r.flow.loop.CancelGroup(k)
			}
			r.flow.loop.Stop()
		}
	})
	if r.opts.continuous().Supply != nil {
		ctl.Follow(r.opts.continuous().Supply)
	}
	return ctl
}

// maxInflight is the bound on a run's groups in flight. A continuous
// run's groups in flight when the demand is met are not surplus: they
// count toward the next demand. Its bound is that of a run without a
// target (the loop filled twice over, groups.MaxInflight), so that the
// generation slots stay busy while a group's last members finish; the
// demand (and serve.max_staleness's gate) pace it.
func maxInflight(cfg *config.Config, continuous bool) int {
	gc := cfg.Groups
	if continuous {
		gc.Target = 0
	}
	return groups.MaxInflight(gc, cfg.Repeat.N, cfg.Generate.Concurrency, cfg.Env.TotalConcurrency())
}

// setPriority gives the generator the controller's request priorities
// (groups.Controller.Priority), or Continuous.Priority for every request,
// under generate.priority: auto; none under off or through the Batch API.
func (r *run) setPriority() {
	gen := r.built.Generator
	if gen == nil {
		return
	}
	if !r.cfg.Generate.PriorityOn() {
		gen.SetPriority(nil)
		return
	}
	ctl, fixed := r.flow.ctl, r.opts.continuous().Priority
	gen.SetPriority(func(ro *pipeline.Rollout) (int, bool) {
		if fixed != nil {
			return *fixed, true
		}
		if ro.Task == nil {
			return 0, false
		}
		return ctl.Priority(ro.Task.Index)
	})
}

// setEarlyCancel cancels, under groups.cancel_undecided (a target, the
// keep rule nonzero_std, order: completion, on_target: cancel), the
// undecided groups in flight once the decided ones hold the target
// (groups.Controller.EarlyCancel).
func (r *run) setEarlyCancel() {
	gc := r.cfg.Groups
	if gc.CancelUndecided == nil || !*gc.CancelUndecided || gc.Target == 0 || gc.Keep != "nonzero_std" || gc.Order == "task" ||
		gc.OnTarget != "cancel" || gc.Resample == groups.ResampleBatch || r.opts.continuous().Supply != nil {
		return
	}
	rule := groups.NewRule(gc)
	r.flow.ctl.EarlyCancel(rule.Value, func(k pipeline.GroupKey) {
		if l := r.flow.loop; l != nil {
			l.CancelGroup(k)
		}
	})
}
