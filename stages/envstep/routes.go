package envstep

import (
	"fmt"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
)

// Several environments in one run (env.routes): each row's route is chosen
// before its prompt is rendered (RouteTask), its rollouts carry the
// route's name (the env column), the Stepper steps them with the route's
// environment under the route's limits (FromConfig), and the generate
// stage bounds them by the route's max_seq_len (SeqLenOf).

// RouteTask sets t.Env to the row's route; without routes it leaves it
// empty (the run's only environment). The error names the row, the route
// field, the value and the routes known.
func (c *Config) RouteTask(t *pipeline.Task) error {
	if !c.Routed() {
		return nil
	}
	route, err := c.RouteOf(t.Fields)
	if err != nil {
		return fmt.Errorf("%s: %w", t.Source, err)
	}
	t.Env = route
	return nil
}

// SeqLenOf returns each trajectory's max_seq_len (its route's, or the
// section's without routes; 0: no bound): max_seq_len's one carrier, from
// the config to the generate stage that enforces it
// (generate.Options.MaxSeqLenOf). Nil when no trajectory has a bound.
func (c *Config) SeqLenOf() func(*pipeline.Rollout) int {
	if !c.Routed() {
		if c.MaxSeqLen == 0 {
			return nil
		}
		n := c.MaxSeqLen
		return func(*pipeline.Rollout) int { return n }
	}
	limits := map[string]int{}
	for _, rs := range c.RouteSpecs() {
		limits[rs.Route] = rs.Config.MaxSeqLen
	}
	return func(r *pipeline.Rollout) int { return limits[r.Env] }
}

// FromConfig returns the Stepper of the section: one environment (New),
// or one per route under the route's limits and concurrency (NewRouted).
// env returns the environment of a route (RouteSpec.Route).
func FromConfig(c *Config, env func(route string) envs.Env) *Stepper {
	if !c.Routed() {
		return New(env(c.Name), c.Name, c.Limits())
	}
	var routes []Route
	for _, rs := range c.RouteSpecs() {
		routes = append(routes, Route{Name: rs.Route, Env: env(rs.Route), Limits: rs.Config.Limits(), Concurrency: rs.Config.Concurrency})
	}
	return NewRouted(routes)
}
