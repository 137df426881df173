package groups

import (
	"context"
	"math"
	"sync"

	"github.com/trajflow/trajflow/pipeline"
)

// Job is one group to sample: a task in one attempt.
type Job struct {
	Task    *pipeline.Task
	Attempt int
	// Fresh is true for a task just read (its prompt is still to render).
	Fresh bool
}

// Controller paces the source; it is the dynamic-sampling control. Without a target it only bounds the groups
// in flight. With groups.target K it keeps about as many groups in flight as
// the observed keep rate says are still needed to reach K, stops pulling
// tasks once K groups are kept, and tells the pipeline to stop. It also
// carries dropped tasks back for another attempt (groups.max_attempts).
type Controller struct {
	target      int
	maxGroups   int
	maxAttempts int
	resampling  bool
	onReached   func()

	mu        sync.Mutex
	changed   chan struct{}
	inflight  int // groups handed out and not finished
	finished  int
	kept      int
	again     []Job
	exhausted bool
	reached   bool
	stopped   bool
}

// NewController returns the controller of the groups config: at most
// maxGroups groups in flight, kept groups already counted (a resumed run's),
// and onReached called once when the target is reached.
func NewController(cfg Config, maxGroups, kept int, onReached func()) *Controller {
	c := newController(cfg.Target, maxGroups, cfg.MaxAttempts, cfg.Resample == "same_task", onReached)
	c.kept = kept
	return c
}

func newController(target, maxGroups, maxAttempts int, resampling bool, onReached func()) *Controller {
	return &Controller{
		target: target, maxGroups: max(maxGroups, 1), maxAttempts: max(maxAttempts, 1),
		resampling: resampling, onReached: onReached, changed: make(chan struct{}, 1),
	}
}

// MaxInflight is the bound on groups in flight when groups.max_inflight is
// unset, for groups of n under the generate and env concurrency.
func MaxInflight(cfg Config, n, genConcurrency, envConcurrency int) int {
	switch {
	case cfg.MaxInflight > 0:
		return cfg.MaxInflight
	case cfg.Target > 0:
		// Under a target every group started beyond the need is waste:
		// keep no more in flight than the generation slots serve at once.
		return max(genConcurrency/n, 1)
	default:
		// Enough groups to fill the loop twice over: the loop always has
		// trajectories waiting to be admitted.
		return 2*(genConcurrency+envConcurrency)/n + 1
	}
}

// Action is what the source does next.
type Action int

const (
	ActRead   Action = iota // read the next task from the input
	ActRepeat               // sample the returned job again
	ActDone                 // stop
)

// Next blocks until the source may hand out another group, and says how.
// After ActRead the source must call readDone.
func (c *Controller) Next(ctx context.Context) (Action, Job, error) {
	for {
		c.mu.Lock()
		switch {
		case c.reached || c.stopped:
			c.mu.Unlock()
			return ActDone, Job{}, nil
		case len(c.again) > 0:
			j := c.again[0]
			c.again = c.again[1:]
			c.inflight++
			c.mu.Unlock()
			return ActRepeat, j, nil
		case !c.exhausted && c.inflight < c.budget():
			c.inflight++
			c.mu.Unlock()
			return ActRead, Job{}, nil
		case c.exhausted && c.inflight == 0:
			c.mu.Unlock()
			return ActDone, Job{}, nil
		}
		c.mu.Unlock()
		select {
		case <-c.changed:
		case <-ctx.Done():
			return ActDone, Job{}, ctx.Err()
		}
	}
}

// ReadDone reports the outcome of an ActRead: ok false means the input
// ended, so the group handed out is not in flight after all.
func (c *Controller) ReadDone(ok bool) {
	if ok {
		return
	}
	c.mu.Lock()
	c.inflight--
	c.exhausted = true
	c.mu.Unlock()
	c.signal()
}

// budget is the number of groups to keep in flight. Under a target it is
// the groups still needed divided by the keep rate seen so far (with one
// pseudo-observation each way, so it starts at 2× the need).
func (c *Controller) budget() int {
	if c.target == 0 {
		return c.maxGroups
	}
	need := float64(c.target - c.kept)
	rate := (float64(c.kept) + 1) / (float64(c.finished) + 2)
	// need/rate groups hold the need only on average; falling short by
	// one costs a whole further group's latency, so add a safety margin
	// of marginZ standard deviations of the kept count.
	b := int(math.Ceil((need + marginZ*math.Sqrt(need*(1-rate))) / rate))
	return min(max(b, 1), c.maxGroups)
}

// marginZ is the budget's safety margin in standard deviations: about an
// 80% chance that the groups in flight hold the kept groups still needed.
// Measured on the schedule benchmark (BENCHMARKS.md): 0.8 removes the
// starvation at low keep rates that 0 leaves; 1.28 costs tokens at high
// keep rates without being faster.
const marginZ = 0.8

// Verdict is what becomes of a finished group.
type Verdict int

const (
	Keep    Verdict = iota
	Drop            // the keep rule dropped it
	Surplus         // finished after the target was reached
)

// GroupDone records a finished group (after its keep rule ran) and says
// what to do with it. Groups finishing after the target are surplus.
func (c *Controller) GroupDone(g *pipeline.Group, task *pipeline.Task) Verdict {
	c.mu.Lock()
	c.inflight--
	c.finished++
	v := Drop
	switch {
	case c.reached:
		v = Surplus
	case g.Kept:
		v = Keep
		c.kept++
		if c.target > 0 && c.kept >= c.target {
			c.reached = true
			c.again = nil
		}
	case c.resampling && g.Key.Attempt+1 < c.maxAttempts && g.FilterReason != ReasonError:
		c.again = append(c.again, Job{Task: task, Attempt: g.Key.Attempt + 1})
	}
	reached := v == Keep && c.reached
	c.mu.Unlock()
	c.signal()
	if reached && c.onReached != nil {
		c.onReached()
	}
	return v
}

// Abandon gives back a group handed out that will never finish (its task
// was rejected).
func (c *Controller) Abandon() {
	c.mu.Lock()
	c.inflight--
	c.mu.Unlock()
	c.signal()
}

// Stop ends admission: Next hands out no more groups and returns ActDone,
// at once where it waits. Groups already handed out go on (a run stopping
// on a signal or a fatal error lets them finish or cancels them).
func (c *Controller) Stop() {
	c.mu.Lock()
	c.stopped = true
	c.again = nil
	c.mu.Unlock()
	c.signal()
}

// ShortOfTarget reports whether a target was set and not reached.
func (c *Controller) ShortOfTarget() (kept int, short bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kept, c.target > 0 && c.kept < c.target
}

func (c *Controller) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// MarkSurplus marks a group that finished after the kept target was
// reached: not kept, for reason target, its ok members filtered.
func MarkSurplus(g *pipeline.Group) {
	g.Kept, g.FilterReason = false, ReasonTarget
	for _, r := range g.Rollouts {
		r.Kept, r.FilterReason = false, ReasonTarget
		if r.Status == pipeline.StatusOK {
			r.Status = pipeline.StatusFiltered
		}
	}
}
