package repeat

import (
	"context"

	"github.com/trajflow/trajflow/pipeline"
)

// NewStage is the repeat stage: it expands each job's task into its n
// rollouts with e, and tells dispatched how many it sent.
func NewStage(g *pipeline.Graph, e *Expander, n int, dispatched func(int)) *pipeline.Stage[pipeline.Job, *pipeline.Rollout] {
	return pipeline.NewStage(g, "repeat", 1, n, func(ctx context.Context, j pipeline.Job) ([]*pipeline.Rollout, error) {
		rs := e.Expand(j.Task, j.Attempt)
		dispatched(len(rs))
		return rs, nil
	})
}

// Renew is the rollout that samples f again (a sample retry): f's
// rollout expanded afresh, with the retry's seed.
func (e *Expander) Renew(f *pipeline.Rollout) *pipeline.Rollout {
	fresh := e.Expand(f.Task, f.Attempt)[f.RolloutIndex]
	fresh.Seed = RetrySeed(f.Seed, f.Retries+1)
	return fresh
}
