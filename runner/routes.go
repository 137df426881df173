package runner

import (
	"fmt"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/envstep"
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
