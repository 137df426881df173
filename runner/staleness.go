package runner

import (
	"context"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
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

// holdUnserved holds the task of a kept group routed to data/ until the
// service hands the group out or sets it aside (Continuous.Unserved).
func (r *run) holdUnserved(g *pipeline.Group, dest string) {
	u := r.opts.continuous().Unserved
	if u == nil || dest != schema.DataDir || len(g.Rollouts) == 0 || g.Rollouts[0].Task == nil {
		return
	}
	u.Hold(g.Rollouts[0].Task, g.Key.Attempt, false)
}

// resumeUnserved decides a task read that a resumed run found done, its
// latest group kept (Continuous.Unserved): a group the service set aside
// as too stale to hand out, with no attempt committed since, is sampled
// again in the next attempt (skip false); one whose next attempt was
// committed, not kept, is decided as any attempt dropped (sampled again
// when it was dropped as stale under requeue, or under groups.resample);
// any other stays done, its task held while the service expects its
// group.
func (r *run) resumeUnserved(t *pipeline.Task, resample bool) (skip bool, attempt int) {
	u := r.opts.continuous().Unserved
	kept, last, ok := r.done.KeptAttempt(t.Index)
	if u == nil || !ok {
		return true, 0
	}
	if last > kept {
		if !u.Settle(pipeline.GroupKey{TaskIndex: t.Index, Attempt: kept}) {
			return true, 0
		}
		return r.done.SkipDropped(t.Index, r.cfg.Groups.MaxAttempts, resample)
	}
	if u.Resumed(t, kept) {
		return false, kept + 1
	}
	return true, 0
}
