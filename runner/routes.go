package runner

import (
	"fmt"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/envstep"
	"github.com/trajflow/trajflow/stages/template"
)

// Several environments in one run (env.routes): each row's route is chosen
// before its prompt is rendered, its rollouts carry the route's name (the
// env column), and the Stepper steps them with the route's environment
// under the route's limits.

// routeTask sets t.Env to the row's route; without routes it leaves it
// empty (the run's only environment). The error names the route field, the
// value and the routes known.
func (r *run) routeTask(t *pipeline.Task) error {
	if !r.cfg.Env.Routed() {
		return nil
	}
	route, err := r.cfg.Env.RouteOf(t.Fields)
	if err != nil {
		return fmt.Errorf("%s: %w", t.Source, err)
	}
	t.Env = route
	return nil
}

// stepper is the env stage's Stepper: one environment, or one per route.
func (r *run) stepper() *envstep.Stepper {
	cfg := r.cfg
	if !cfg.Env.Routed() {
		return envstep.New(r.envs[cfg.Env.Name], cfg.Env.Name, cfg.Env.Limits())
	}
	var routes []envstep.Route
	for _, rs := range cfg.Env.RouteSpecs() {
		routes = append(routes, envstep.Route{
			Name: rs.Route, Env: r.envs[rs.Route], Limits: rs.Config.Limits(), Concurrency: rs.Config.Concurrency,
		})
	}
	return envstep.NewRouted(routes)
}

// maxSeqLenOf is each trajectory's max_seq_len (its route's); nil without
// routes (env.max_seq_len holds for every trajectory).
func (r *run) maxSeqLenOf() func(*pipeline.Rollout) int {
	if !r.cfg.Env.Routed() {
		return nil
	}
	limits := map[string]int{}
	for _, rs := range r.cfg.Env.RouteSpecs() {
		limits[rs.Route] = rs.Config.MaxSeqLen
	}
	return func(ro *pipeline.Rollout) int { return limits[ro.Env] }
}

// stepPrompts builds generate.Options.StepPrompt from the routes'
// env.history_length (nil when no route has it: every request is the
// whole chat). Without routes every rollout takes the env section's.
func stepPrompts(cfg *config.Config) (func(*pipeline.Rollout) ([]pipeline.Message, bool), error) {
	prompts := map[string]*template.StepPrompt{}
	for _, rs := range cfg.Env.RouteSpecs() {
		h := rs.Config.HistoryLength
		if h == nil {
			continue
		}
		p, err := template.NewStepPrompt(*h, rs.Config.StepTemplate, rs.Config.HistoryTemplate)
		if err != nil {
			return nil, err
		}
		prompts[rs.Route] = p
	}
	if len(prompts) == 0 {
		return nil, nil
	}
	single := prompts[cfg.Env.Name]
	routed := cfg.Env.Routed()
	return func(r *pipeline.Rollout) ([]pipeline.Message, bool) {
		p := single
		if routed {
			p = prompts[r.Env]
		}
		if p == nil {
			return nil, false
		}
		return p.Messages(r), true
	}, nil
}
