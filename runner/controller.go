package runner

import (
	"context"
	"math"
	"sync"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/groups"
)

// job is one group to sample: a task in one attempt.
type job struct {
	task    *pipeline.Task
	attempt int
	// fresh is true for a task just read (its prompt is still to render).
	fresh bool
}

// controller paces the source. Without a target it only bounds the groups
// in flight. With groups.target K it keeps about as many groups in flight as
// the observed keep rate says are still needed to reach K, stops pulling
// tasks once K groups are kept, and tells the pipeline to stop. It also
// carries dropped tasks back for another attempt (groups.max_attempts).
type controller struct {
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
	again     []job
	exhausted bool
	reached   bool
}

func newController(target, maxGroups, maxAttempts int, resampling bool, onReached func()) *controller {
	return &controller{
		target: target, maxGroups: max(maxGroups, 1), maxAttempts: max(maxAttempts, 1),
		resampling: resampling, onReached: onReached, changed: make(chan struct{}, 1),
	}
}

// action is what the source does next.
type action int

const (
	actRead   action = iota // read the next task from the input
	actRepeat               // sample the returned job again
	actDone                 // stop
)

// next blocks until the source may hand out another group, and says how.
// After actRead the source must call readDone.
func (c *controller) next(ctx context.Context) (action, job, error) {
	for {
		c.mu.Lock()
		switch {
		case c.reached:
			c.mu.Unlock()
			return actDone, job{}, nil
		case len(c.again) > 0:
			j := c.again[0]
			c.again = c.again[1:]
			c.inflight++
			c.mu.Unlock()
			return actRepeat, j, nil
		case !c.exhausted && c.inflight < c.budget():
			c.inflight++
			c.mu.Unlock()
			return actRead, job{}, nil
		case c.exhausted && c.inflight == 0:
			c.mu.Unlock()
			return actDone, job{}, nil
		}
		c.mu.Unlock()
		select {
		case <-c.changed:
		case <-ctx.Done():
			return actDone, job{}, ctx.Err()
		}
	}
}

// readDone reports the outcome of an actRead: ok false means the input
// ended, so the group handed out is not in flight after all.
func (c *controller) readDone(ok bool) {
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
func (c *controller) budget() int {
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

// verdict is what becomes of a finished group.
type verdict int

const (
	keepGroup verdict = iota
	dropGroup
	surplusGroup // finished after the target was reached
)

// groupDone records a finished group (after its keep rule ran) and says
// what to do with it. Groups finishing after the target are surplus.
func (c *controller) groupDone(g *pipeline.Group, task *pipeline.Task) verdict {
	c.mu.Lock()
	c.inflight--
	c.finished++
	v := dropGroup
	switch {
	case c.reached:
		v = surplusGroup
	case g.Kept:
		v = keepGroup
		c.kept++
		if c.target > 0 && c.kept >= c.target {
			c.reached = true
			c.again = nil
		}
	case c.resampling && g.Key.Attempt+1 < c.maxAttempts && g.FilterReason != groups.ReasonError:
		c.again = append(c.again, job{task: task, attempt: g.Key.Attempt + 1})
	}
	reached := v == keepGroup && c.reached
	c.mu.Unlock()
	c.signal()
	if reached && c.onReached != nil {
		c.onReached()
	}
	return v
}

// abandon gives back a group handed out that will never finish (its task
// was rejected).
func (c *controller) abandon() {
	c.mu.Lock()
	c.inflight--
	c.mu.Unlock()
	c.signal()
}

// shortOfTarget reports whether a target was set and not reached.
func (c *controller) shortOfTarget() (kept int, short bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kept, c.target > 0 && c.kept < c.target
}

func (c *controller) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}
