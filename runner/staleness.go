package runner

import (
	"context"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/groups"
)

// admitStale waits for the staleness gate (Continuous.Staleness) to admit
// j's group. It reports false when the run stops (or ctx ends) first: the
// group is given back to the controller.
func (r *run) admitStale(ctx context.Context, j groups.Job) bool {
	st := r.opts.continuous().Staleness
	if st == nil {
		return true
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.stopper.began:
			cancel()
		case <-actx.Done():
		}
	}()
	if _, err := st.Admit(actx); err != nil {
		r.flow.ctl.Abandon(j.Task)
		return false
	}
	return true
}

// staleDone ends a finished group's place in the staleness gate after
// its keep rule, and applies the gate's on_stale to it; requeue is true
// when its task is to be sampled again.
func (r *run) staleDone(g *pipeline.Group) (requeue bool) {
	st := r.opts.continuous().Staleness
	if st == nil {
		return false
	}
	requeue = st.Apply(g)
	st.Done(g.Kept)
	return requeue
}

// staleAbandon ends the place of a group admitted that will not finish
// (its row was rejected, a stop cut it off).
func (r *run) staleAbandon() {
	if st := r.opts.continuous().Staleness; st != nil {
		st.Done(false)
	}
}
