package groups

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"

	"github.com/trajflow/trajflow/pipeline"
)

// Job is one group to sample: a task in one attempt.
type Job = pipeline.Job

// Controller paces the source; it is the dynamic-sampling control. Without a target it only bounds the groups
// in flight. With groups.target K it keeps about as many groups in flight as
// the observed keep rate says are still needed to reach K, stops pulling
// tasks once K groups are kept, and tells the pipeline to stop. It also
// carries dropped tasks back for another attempt (groups.max_attempts).
//
// With groups.order: task it also puts finished groups back in the order
// their tasks were read: a task's final group (kept, or dropped with no
// attempt left) is held until every earlier task is resolved, and only then
// counted and committed. The kept set under a target is then the first K
// passing groups in task order, whatever the timing.
type Controller struct {
	target      int
	maxGroups   int
	maxAttempts int
	resampling  bool
	onReached   func()
	ordered     bool
	unfiltered  bool
	// batch: groups.resample: batch (verl-agent's dynamic sampling): once
	// the input is read and every group of a round finished short of the
	// target, the next round samples every task read again (kept ones
	// included), up to maxAttempts rounds; no task is read twice.
	batch bool
	// supply, when set, is the moving target of a continuous run
	// (Follow): target is read from it and never counts as reached.
	supply *Supply

	mu       sync.Mutex
	changed  chan struct{}
	inflight int // groups handed out and not finished
	finished int
	kept     int
	// resumed are the kept groups of earlier runs (counted in kept, not
	// observed by this controller: the keep rate leaves them out).
	resumed   int
	again     []Job
	exhausted bool
	reached   bool
	stopped   bool

	// order: the tasks read and not yet released, in read order, and
	// their slots; heldKept counts the kept groups among them.
	order    []int64
	slots    map[int64]*slot
	heldKept int
	// cands are the last attempts the keep rule dropped, first first,
	// that groups.on_exhausted: keep_unfiltered may still keep: at most
	// as many as the target still needs.
	cands []*pipeline.Group
	// out are decisions made by a call that does not return them
	// (Abandon), for the next GroupDone or Flush.
	out []Decision
	// tasks are the tasks read that a batch round samples again, in read
	// order; round is the current round (the attempt of its groups).
	tasks []*pipeline.Task
	round int

	// prio is the scheduling state of each task's group in flight, keyed
	// by task index (a task has one group in flight at a time): its
	// admission number and whether it was admitted beyond the need
	// (Priority). seq numbers the admissions; nextSpec is the speculative
	// flag of the group an ActRead handed out, for its ReadDone.
	prio     map[int64]*groupPrio
	seq      int64
	nextSpec bool
	// early, when set (EarlyCancel), reads a member's value for the keep
	// rule and cancels a group; decided counts the groups in flight it
	// found decided; spare is groups.cancel_undecided_spare.
	early   *earlyCancel
	decided int
	spare   int
}

// earlyCancel is EarlyCancel's setting.
type earlyCancel struct {
	value  func(*pipeline.Rollout) float64
	cancel func(pipeline.GroupKey)
}

// groupPrio is one group's scheduling state (Controller.Priority) and,
// under EarlyCancel, what its finished members decided.
type groupPrio struct {
	seq     int64
	spec    bool
	attempt int
	// done counts its finished members, whatever their status
	// (CancelOrder). seen counts its finished ok members, first is the
	// first one's value; decided: two of them differ, so the keep rule
	// keeps the group unless a member fails; cancelled: EarlyCancel
	// cancelled it.
	done      int
	seen      int
	first     float64
	decided   bool
	cancelled bool
}

// slot is one read task's state under groups.order: task.
type slot struct {
	resolved bool
	group    *pipeline.Group // its final group; nil: none (rejected, skipped)
}

// Decision is what becomes of one finished group.
type Decision struct {
	Group   *pipeline.Group
	Verdict Verdict
}

// NewController returns the controller of the groups config: at most
// maxGroups groups in flight, kept groups already counted (a resumed run's),
// and onReached called once when this controller reaches the target (not
// when the earlier runs' kept groups already reach it).
func NewController(cfg Config, maxGroups, kept int, onReached func()) *Controller {
	c := newController(cfg.Target, maxGroups, cfg.MaxAttempts, cfg.Resample == "same_task", onReached)
	c.kept, c.resumed = kept, kept
	// A rerun of a run that reached its target has nothing to do: Next
	// says so at once rather than waiting for a budget of zero to grow.
	c.reached = c.target > 0 && kept >= c.target
	c.ordered = cfg.Order == "task"
	c.unfiltered = cfg.OnExhausted == "keep_unfiltered"
	c.batch = cfg.Resample == ResampleBatch
	c.spare = cfg.Spare()
	return c
}

func newController(target, maxGroups, maxAttempts int, resampling bool, onReached func()) *Controller {
	return &Controller{
		target: target, maxGroups: max(maxGroups, 1), maxAttempts: max(maxAttempts, 1),
		resampling: resampling, onReached: onReached, changed: make(chan struct{}, 1),
		slots: map[int64]*slot{}, prio: map[int64]*groupPrio{},
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
			c.admitted(j.Task.Index, c.speculative())
			c.prio[j.Task.Index].attempt = j.Attempt
			c.inflight++
			c.mu.Unlock()
			return ActRepeat, j, nil
		case !c.exhausted && c.inflight < c.budget() && c.open():
			c.nextSpec = c.speculative()
			c.inflight++
			c.mu.Unlock()
			return ActRead, Job{}, nil
		case c.exhausted && c.inflight == 0 && c.nextRound():
			c.mu.Unlock()
			continue
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

// nextRound starts the next round of groups.resample: batch, when one is
// left: every task read is sampled again, in read order, with the round's
// attempt. It reports whether it queued anything.
func (c *Controller) nextRound() bool {
	if !c.batch || c.reached || c.stopped || c.round+1 >= c.maxAttempts || len(c.tasks) == 0 {
		return false
	}
	c.round++
	for _, t := range c.tasks {
		c.again = append(c.again, Job{Task: t, Attempt: c.round})
	}
	return true
}

// ReadDone reports the outcome of an ActRead: the task read, or nil when
// the input ended, so the group handed out is not in flight after all.
func (c *Controller) ReadDone(t *pipeline.Task) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t != nil {
		c.admitted(t.Index, c.nextSpec)
		if c.batch {
			c.tasks = append(c.tasks, t)
		}
		if c.ordered {
			c.order = append(c.order, t.Index)
			c.slots[t.Index] = &slot{}
		}
		return
	}
	c.inflight--
	c.exhausted = true
	c.signal()
}

// open reports whether task order lets another task be read: the tasks
// read and not yet released (in flight, or finished and waiting for an
// earlier one) stay within a window of windowGroups× the bound in flight,
// so that one slow task holds back a bounded number of finished groups.
func (c *Controller) open() bool {
	return !c.ordered || len(c.order) < windowGroups*c.maxGroups
}

// windowGroups is the task-order window in multiples of the groups in
// flight.
const windowGroups = 4

// budget is the number of groups to keep in flight. Under a target it is
// the groups still needed divided by the keep rate seen so far (with one
// pseudo-observation each way, so it starts at 2× the need). Under task
// order the kept groups held for an earlier task count as kept: when they
// hold the need, no further task is read.
func (c *Controller) budget() int {
	if c.supply != nil {
		c.target = c.supply.Target()
		if c.target == 0 {
			return 0
		}
	}
	if c.target == 0 {
		return c.maxGroups
	}
	if c.kept+c.heldKept+c.decided >= c.target {
		// Under EarlyCancel the groups decided in flight count: they are
		// kept unless a member fails.
		return 0
	}
	need := float64(c.target - c.kept - c.heldKept)
	rate := (float64(c.kept-c.resumed+c.heldKept) + 1) / (float64(c.finished) + 2)
	// need/rate groups hold the need only on average; falling short by
	// one costs a whole further group's latency, so add a safety margin
	// of marginZ standard deviations of the kept count.
	b := int(math.Ceil((need + marginZ*math.Sqrt(need*(1-rate))) / rate))
	return min(max(b, 1), c.maxGroups)
}

// speculative reports whether a group admitted now goes beyond the need:
// under a target, the groups in flight already hold the kept groups still
// needed at the keep rate seen so far (the budget's mean, without its
// margin). Called with c.mu held, before inflight counts the new group.
func (c *Controller) speculative() bool {
	target := c.target
	if c.supply != nil {
		target = c.supply.Target()
	}
	if target == 0 {
		return false
	}
	need := float64(target - c.kept - c.heldKept)
	if need <= 0 {
		return true
	}
	rate := (float64(c.kept-c.resumed+c.heldKept) + 1) / (float64(c.finished) + 2)
	return float64(c.inflight) >= math.Ceil(need/rate)
}

// admitted notes the admission of task's group. Called with c.mu held.
func (c *Controller) admitted(task int64, spec bool) {
	c.seq++
	c.prio[task] = &groupPrio{seq: c.seq, spec: spec}
}

// EarlyCancel makes the controller cancel, under a target, the groups in
// flight whose outcome is still open as soon as the kept groups and the
// groups in flight already decided hold the target plus its spares
// (groups.cancel_undecided_spare): value is a finished member's value
// under the keep rule nonzero_std (its reward or metric), and two members
// of different values decide a group (the rule keeps it unless a member
// fails); cancel cancels a group's trajectories, called in CancelOrder's
// order. The undecided groups then only cost tokens and slow the decided
// ones' last members: they are cancelled at once, and come back from
// GroupDone as Surplus, uncounted. The spares let the first K decided
// groups to finish be kept rather than the slowest waited for; no group
// is admitted once the decided ones hold the target. Should a decided
// group fail after all, the budget opens again and new groups are
// admitted. RolloutDone must hear of every finished rollout. Not for
// groups.order: task (an undecided earlier task may pass) or a continuous
// run.
func (c *Controller) EarlyCancel(value func(*pipeline.Rollout) float64, cancel func(pipeline.GroupKey)) {
	c.mu.Lock()
	c.early = &earlyCancel{value: value, cancel: cancel}
	c.mu.Unlock()
}

// Attempt notes the attempt of the group of a task read (ActRead), once
// the source knows it (a resumed run's task may start at a later one).
func (c *Controller) Attempt(task int64, attempt int) {
	c.mu.Lock()
	if p := c.prio[task]; p != nil {
		p.attempt = attempt
	}
	c.mu.Unlock()
}

// RolloutDone reports a finished rollout (EarlyCancel, CancelOrder).
func (c *Controller) RolloutDone(r *pipeline.Rollout) {
	if r.Task == nil {
		return
	}
	c.mu.Lock()
	e := c.early
	p := c.prio[r.Task.Index]
	if p != nil {
		p.done++
	}
	if e == nil || p == nil || p.decided || p.cancelled || r.Status != pipeline.StatusOK || c.reached || c.ordered || c.supply != nil {
		c.mu.Unlock()
		return
	}
	v := e.value(r)
	p.seen++
	switch {
	case p.seen == 1:
		p.first = v
		c.mu.Unlock()
		return
	case v == p.first || math.IsNaN(v) && math.IsNaN(p.first):
		c.mu.Unlock()
		return
	}
	p.decided = true
	c.decided++
	var cancel []pipeline.GroupKey
	if c.kept+c.heldKept+c.decided >= c.target+c.spare {
		cancel = c.cancelOrder(func(q *groupPrio) bool { return !q.decided && !q.cancelled })
		for _, k := range cancel {
			c.prio[k.TaskIndex].cancelled = true
		}
	}
	c.mu.Unlock()
	for _, k := range cancel {
		e.cancel(k)
	}
}

// cancelOrder returns the keys of the groups in flight that pick
// accepts, the furthest from done first: the fewest members finished,
// then the lowest priority (speculative groups, then the latest
// admitted). Called with c.mu held.
func (c *Controller) cancelOrder(pick func(*groupPrio) bool) []pipeline.GroupKey {
	type entry struct {
		key pipeline.GroupKey
		p   *groupPrio
	}
	var es []entry
	for task, p := range c.prio {
		if pick(p) {
			es = append(es, entry{pipeline.GroupKey{TaskIndex: task, Attempt: p.attempt}, p})
		}
	}
	slices.SortFunc(es, func(a, b entry) int {
		switch {
		case a.p.done != b.p.done:
			return cmp.Compare(a.p.done, b.p.done)
		case a.p.spec != b.p.spec:
			if a.p.spec {
				return -1
			}
			return 1
		}
		return cmp.Compare(b.p.seq, a.p.seq)
	})
	keys := make([]pipeline.GroupKey, len(es))
	for i, e := range es {
		keys[i] = e.key
	}
	return keys
}

// CancelOrder returns the groups in flight in the order to cancel them
// when the target is reached: the furthest from done first (the fewest
// members finished, then the lowest priority), so that the engine frees
// first the slots of the work furthest from any use. A continuous run
// reaches no target: its groups in flight carry over to the next demand.
func (c *Controller) CancelOrder() []pipeline.GroupKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancelOrder(func(*groupPrio) bool { return true })
}

// SpeculativeTier is added to the priority of a group admitted beyond the
// need (Priority): such a group's requests go after every needed group's,
// whenever admitted.
const SpeculativeTier = 1 << 30

// Priority is the scheduling priority of the next request of a rollout of
// task's group, lower first, as vLLM's and SGLang's priority fields take
// it (generate.priority): groups admitted earlier first, so that the
// engine finishes the oldest groups rather than spreading its batch over
// every group in flight; and a group admitted beyond the need (only to
// keep the batch full while the kept target is still open) after every
// needed group, so that it runs on capacity the needed groups leave free
// and is the first preempted when they need it. False for a task with no
// group in flight here.
func (c *Controller) Priority(task int64) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.prio[task]
	if !ok {
		return 0, false
	}
	v := int(p.seq % SpeculativeTier)
	if p.spec {
		v += SpeculativeTier
	}
	return v, true
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
	Keep           Verdict = iota
	Drop                   // the keep rule dropped it
	Surplus                // finished after the target was reached
	KeepUnfiltered         // a last attempt the keep rule dropped, kept to fill the target (groups.on_exhausted)
)

// GroupDone records a finished group (after its keep rule ran) and says
// what to do with the groups it releases: under completion order the group
// itself; under task order the groups, in task order, that were waiting
// for it (none while an earlier task is unresolved). Groups finishing
// after the target are surplus. A group that groups.on_exhausted:
// keep_unfiltered may still keep is held until the target is reached or
// Flush.
func (c *Controller) GroupDone(g *pipeline.Group, task *pipeline.Task) []Decision {
	c.mu.Lock()
	c.inflight--
	p := c.prio[task.Index]
	delete(c.prio, task.Index)
	if p != nil && p.decided {
		c.decided--
	}
	early := p != nil && p.cancelled
	if !early {
		c.finished++
	}
	was := c.reached
	switch {
	case c.reached || early:
		// After the target, or cancelled once the groups decided held
		// it: not counted, as a group finishing after the target.
		c.out = append(c.out, Decision{g, Surplus})
	case !g.Kept && c.resampling && g.Key.Attempt+1 < c.maxAttempts && g.FilterReason != ReasonError:
		// Not the task's last word: dropped at once, sampled again.
		c.again = append(c.again, Job{Task: task, Attempt: g.Key.Attempt + 1})
		c.out = append(c.out, Decision{g, Drop})
	case c.ordered:
		if s := c.slots[task.Index]; s != nil {
			s.resolved, s.group = true, g
			if g.Kept {
				c.heldKept++
			}
			c.release()
			break
		}
		c.commit(g) // a task not read by this controller (a test's)
	default:
		c.commit(g)
	}
	out := c.takeOut()
	reached := c.reached && !was
	c.mu.Unlock()
	c.signal()
	if reached && c.onReached != nil {
		c.onReached()
	}
	return out
}

// release commits, in task order, the final groups of the resolved tasks
// at the head of the order.
func (c *Controller) release() {
	for len(c.order) > 0 {
		s := c.slots[c.order[0]]
		if !s.resolved {
			return
		}
		delete(c.slots, c.order[0])
		c.order = c.order[1:]
		if s.group == nil {
			continue
		}
		if s.group.Kept {
			c.heldKept--
		}
		if c.reached {
			c.out = append(c.out, Decision{s.group, Surplus})
			continue
		}
		c.commit(s.group)
	}
}

// commit decides a task's final group: kept (counting towards the target),
// a candidate for keep_unfiltered, or dropped.
func (c *Controller) commit(g *pipeline.Group) {
	switch {
	case g.Kept:
		c.out = append(c.out, Decision{g, Keep})
		c.kept++
		if c.supply == nil && c.target > 0 && c.kept >= c.target {
			c.reached = true
			c.again = nil
			// The candidates are not needed: they are dropped groups.
			for _, cg := range c.cands {
				c.out = append(c.out, Decision{cg, Drop})
			}
			c.cands = nil
		}
		c.trimCands()
	case c.unfiltered && g.FilterReason != ReasonError && g.FilterReason != ReasonTarget &&
		(!c.batch || g.Key.Attempt+1 >= c.maxAttempts):
		// Under resample: batch only the last round is a last try.
		c.cands = append(c.cands, g)
		c.trimCands()
	default:
		c.out = append(c.out, Decision{g, Drop})
	}
}

// trimCands drops the candidates beyond what the target still needs.
func (c *Controller) trimCands() {
	target := c.target
	if c.supply != nil {
		target = c.supply.Target()
	}
	need := max(target-c.kept, 0)
	for len(c.cands) > need {
		last := c.cands[len(c.cands)-1]
		c.cands = c.cands[:len(c.cands)-1]
		c.out = append(c.out, Decision{last, Drop})
	}
}

func (c *Controller) takeOut() []Decision {
	out := c.out
	c.out = nil
	return out
}

// Abandon gives back a group handed out that will never finish because its
// task was rejected or was committed by an earlier run: under task order
// the task counts as resolved. The groups this releases come with the next
// GroupDone or Flush.
func (c *Controller) Abandon(task *pipeline.Task) {
	c.mu.Lock()
	c.inflight--
	if p := c.prio[task.Index]; p != nil && p.decided {
		c.decided--
	}
	delete(c.prio, task.Index)
	was := c.reached
	if c.batch {
		// A task rejected or done by an earlier run is not sampled again.
		c.tasks = slices.DeleteFunc(c.tasks, func(t *pipeline.Task) bool { return t == task })
	}
	if s := c.slots[task.Index]; c.ordered && s != nil {
		s.resolved = true
		c.release()
	}
	reached := c.reached && !was
	c.mu.Unlock()
	c.signal()
	if reached && c.onReached != nil {
		c.onReached()
	}
}

// CutOff gives back a group a stop cut off: it is not committed, and under
// task order no later task's group is committed either (a resumed run
// redoes them in order).
func (c *Controller) CutOff() {
	c.mu.Lock()
	c.inflight--
	c.mu.Unlock()
	c.signal()
}

// Flush is called once the input of the group stage ended. It returns the
// decisions still owed: groups released by an Abandon and, when the input
// ran out (not a stop) short of the target under groups.on_exhausted:
// keep_unfiltered, the candidates that fill it (KeepUnfiltered; marked
// with MarkUnfiltered by the caller); after a stop the candidates are
// dropped. Held groups that an unresolved earlier task still blocks (a
// stop cut it off) are returned as held: they are not committed.
func (c *Controller) Flush() (out []Decision, held []*pipeline.Group) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := KeepUnfiltered
	if c.stopped || c.reached {
		v = Drop
	}
	for _, g := range c.cands {
		c.out = append(c.out, Decision{g, v})
		if v == KeepUnfiltered {
			c.kept++
		}
	}
	c.cands = nil
	for _, idx := range c.order {
		if s := c.slots[idx]; s.group != nil {
			held = append(held, s.group)
		}
	}
	c.order, c.slots, c.heldKept = nil, map[int64]*slot{}, 0
	return c.takeOut(), held
}

// Stop ends admission: Next hands out no more groups and returns ActDone,
// at once where it waits. Groups already handed out go on (a run stopping
// on a signal or a fatal error lets them finish or cancels them).
func (c *Controller) Stop() {
	c.mu.Lock()
	c.stopped = true
	c.again = nil
	c.tasks = nil
	c.mu.Unlock()
	c.signal()
}

// ShortOfTarget reports whether a target was set and not reached.
func (c *Controller) ShortOfTarget() (kept int, short bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kept, c.supply == nil && c.target > 0 && c.kept < c.target
}

func (c *Controller) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// ReasonUnfiltered prefixes the filter reason of a group kept by
// groups.on_exhausted: keep_unfiltered ("unfiltered:zero_std"): kept,
// although the keep rule dropped it.
const ReasonUnfiltered = "unfiltered:"

// MarkUnfiltered marks a group the keep rule dropped as kept without the
// rule: kept, its filter reason prefixed with ReasonUnfiltered, its
// filtered members ok again.
func MarkUnfiltered(g *pipeline.Group) {
	g.Kept, g.FilterReason = true, ReasonUnfiltered+g.FilterReason
	for _, r := range g.Rollouts {
		r.Kept, r.FilterReason = true, g.FilterReason
		if r.Status == pipeline.StatusFiltered {
			r.Status = pipeline.StatusOK
		}
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
