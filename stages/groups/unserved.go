package groups

import (
	"sync"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
)

// Unserved keeps the tasks of a service's kept groups that are not handed
// out yet, so that a group the service finds too stale to hand out
// (on_stale: requeue) has its task sampled again in a new attempt. A
// committed group carries no task a run could sample from, and the run's
// source reads each task once: the run holds the task of every kept
// group until the service hands the group out (Release) or sets it aside
// (Requeue).
//
// The run holds the tasks of the groups it keeps (Hold) and, resumed, of
// those committed before that the service still queues (Expect, then
// Resumed as the source reads them). A group set aside before its task
// is held (it was committed before a restart and the source has not
// read it again yet, or the service's state recorded it as set aside
// before the restart) is requeued once its task is read (Resumed). Each
// group is requeued at most once. It is safe for concurrent use.
type Unserved struct {
	mu sync.Mutex
	// requeue hands a job to the run's controller (Bind); pending are
	// the jobs due before it was set.
	requeue func(Job)
	pending []Job
	// held are the tasks held, by their kept group, and whether the task
	// is still to be rendered (read by a resumed run, never sampled).
	held map[pipeline.GroupKey]heldTask
	// expected are the groups committed before this run whose task is
	// to be held when the source reads it.
	expected map[pipeline.GroupKey]bool
	// wanted are the groups set aside whose task was not held: requeued
	// when it is.
	wanted   map[pipeline.GroupKey]bool
	requeued int
}

// heldTask is a task held and whether it is still to be rendered.
type heldTask struct {
	task  *pipeline.Task
	fresh bool
}

// NewUnserved returns an empty Unserved.
func NewUnserved() *Unserved {
	return &Unserved{held: map[pipeline.GroupKey]heldTask{}, expected: map[pipeline.GroupKey]bool{}, wanted: map[pipeline.GroupKey]bool{}}
}

// Bind sets the function that hands a requeued job to the run (its
// controller's Requeue). A job due before Bind is handed out at Bind.
func (u *Unserved) Bind(requeue func(Job)) {
	u.mu.Lock()
	u.requeue = requeue
	jobs := u.pending
	u.pending = nil
	u.mu.Unlock()
	for _, j := range jobs {
		requeue(j)
	}
}

// Hold keeps the task of a kept group of the run's (fresh false: rendered)
// until the group is handed out or set aside; a group set aside already
// is requeued at once.
func (u *Unserved) Hold(t *pipeline.Task, attempt int, fresh bool) {
	k := pipeline.GroupKey{TaskIndex: t.Index, Attempt: attempt}
	u.mu.Lock()
	if !u.wanted[k] {
		u.held[k] = heldTask{task: t, fresh: fresh}
		u.mu.Unlock()
		return
	}
	delete(u.wanted, k)
	delete(u.expected, k)
	u.requeued++
	u.send([]Job{{Task: t, Attempt: attempt + 1, Fresh: fresh}})
}

// Expect notes kept groups committed before this run and queued by the
// service: their tasks are held when a resumed run reads them (Resumed).
func (u *Unserved) Expect(keys ...pipeline.GroupKey) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, k := range keys {
		if _, ok := u.held[k]; !ok {
			u.expected[k] = true
		}
	}
}

// Release forgets the groups handed out: they are never set aside.
func (u *Unserved) Release(keys ...pipeline.GroupKey) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, k := range keys {
		delete(u.held, k)
		delete(u.expected, k)
	}
}

// Requeue samples again, in a new attempt, the tasks of the groups set
// aside: at once where the task is held, else once the run reads it
// (Resumed).
func (u *Unserved) Requeue(keys ...pipeline.GroupKey) {
	var jobs []Job
	u.mu.Lock()
	for _, k := range keys {
		delete(u.expected, k)
		h, ok := u.held[k]
		if !ok {
			u.wanted[k] = true
			continue
		}
		delete(u.held, k)
		u.requeued++
		jobs = append(jobs, Job{Task: h.task, Attempt: k.Attempt + 1, Fresh: h.fresh})
	}
	u.send(jobs)
}

// send hands jobs to the run, outside the lock, or keeps them for Bind.
// u.mu is held, and released.
func (u *Unserved) send(jobs []Job) {
	requeue := u.requeue
	if requeue == nil {
		u.pending = append(u.pending, jobs...)
	}
	u.mu.Unlock()
	if requeue == nil {
		return
	}
	for _, j := range jobs {
		requeue(j)
	}
}

// Resumed is told by a resumed run of a task read whose latest attempt
// committed, attempt, was kept. It reports whether that group was set
// aside, so that the run samples the task again in attempt+1 now (the
// requeue is then done); otherwise the task, unrendered, is held while
// the service expects the group.
func (u *Unserved) Resumed(t *pipeline.Task, attempt int) (again bool) {
	k := pipeline.GroupKey{TaskIndex: t.Index, Attempt: attempt}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.wanted[k] {
		delete(u.wanted, k)
		u.requeued++
		return true
	}
	if u.expected[k] {
		delete(u.expected, k)
		u.held[k] = heldTask{task: t, fresh: true}
	}
	return false
}

// Settle is told by a resumed run of a task whose kept group k is
// followed by a later attempt committed: it reports whether k was set
// aside, its requeue then done (the later attempt is its new one).
func (u *Unserved) Settle(k pipeline.GroupKey) (wasSetAside bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.wanted[k] {
		return false
	}
	delete(u.wanted, k)
	return true
}

// Requeued is the number of groups set aside whose task was handed back
// to the run for a new attempt.
func (u *Unserved) Requeued() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.requeued
}

// Holding is the number of tasks held.
func (u *Unserved) Holding() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.held)
}

// HoldKept holds the task of a kept group routed to data/ until the
// service hands the group out or sets it aside. A nil u does nothing.
func (u *Unserved) HoldKept(g *pipeline.Group, dest string) {
	if u == nil || dest != schema.DataDir || len(g.Rollouts) == 0 || g.Rollouts[0].Task == nil {
		return
	}
	u.Hold(g.Rollouts[0].Task, g.Key.Attempt, false)
}

// Resume decides a task read against the work earlier runs committed
// (done): skip when it is done, else the attempt to sample. A task done
// whose latest group was kept, under a service that expects it (u not
// nil): a group the service set aside as too stale to hand out, with no
// attempt committed since, is sampled again in the next attempt; one
// whose next attempt was committed, not kept, is decided as any attempt
// dropped (sampled again when it was dropped as stale under requeue, or
// under groups.resample); any other stays done, its task held while the
// service expects its group.
func (u *Unserved) Resume(t *pipeline.Task, done Committed, maxAttempts int, resample bool) (skip bool, attempt int) {
	if skip, attempt = done.Skip(t.Index, maxAttempts, resample); !skip {
		return false, attempt
	}
	kept, last, ok := done.KeptAttempt(t.Index)
	if u == nil || !ok {
		return true, 0
	}
	if last > kept {
		if !u.Settle(pipeline.GroupKey{TaskIndex: t.Index, Attempt: kept}) {
			return true, 0
		}
		return done.SkipDropped(t.Index, maxAttempts, resample)
	}
	if u.Resumed(t, kept) {
		return false, kept + 1
	}
	return true, 0
}
