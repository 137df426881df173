package groups

import (
	"fmt"
	"math"

	"github.com/trajflow/trajflow/pipeline"
)

// Filter reasons.
const (
	ReasonZeroStd = "zero_std"     // every member has the same value
	ReasonMeanOut = "mean_outside" // the mean is outside mean_in
	ReasonError   = "error"        // a member failed
	ReasonTarget  = "over_target"  // finished after the kept target was reached
)

// Epsilon is added to the std when normalising advantages.
const Epsilon = 1e-6

// Rule computes group statistics and decides whether a group is kept.
type Rule struct {
	// Keep is all, nonzero_std or mean_in.
	Keep string
	// Metric, when set, is the metric nonzero_std compares instead of the
	// reward.
	Metric string
	// Lo and Hi bound the mean for mean_in (inclusive).
	Lo, Hi float64
	// LeaveOneOut uses each member's leave-one-out mean as its baseline.
	LeaveOneOut bool
	// DropErrors drops a group with a failed member under keep: all too
	// (reason error), as every other rule does: such a group is redone
	// rather than kept (a run's default; see run.resume_errors).
	DropErrors bool
}

// NewRule returns the rule of the groups config section.
func NewRule(cfg Config) Rule {
	r := Rule{Keep: cfg.Keep, Metric: cfg.Metric, LeaveOneOut: cfg.Baseline == "leave_one_out"}
	if len(cfg.MeanIn) == 2 {
		r.Lo, r.Hi = cfg.MeanIn[0], cfg.MeanIn[1]
	}
	return r
}

// Apply computes g's mean, std and advantages over its members that
// resolved ok, decides Kept and FilterReason, and copies the group's
// figures onto every member. Members of a dropped group that resolved ok
// become filtered.
//
// Std is the sample standard deviation (n−1 denominator, 0 for one member).
// Advantage is (r − baseline) / (std + ε), the baseline being the group
// mean or, with LeaveOneOut, the mean of the other members.
func (rule Rule) Apply(g *pipeline.Group) {
	var rewards []float64
	var failed int
	for _, r := range g.Rollouts {
		if r.Status == pipeline.StatusOK {
			rewards = append(rewards, r.Reward)
		} else {
			failed++
		}
	}
	g.Mean, g.Std = meanStd(rewards)
	sum := g.Mean * float64(len(rewards))
	for _, r := range g.Rollouts {
		r.GroupRewardMean, r.GroupRewardStd = g.Mean, g.Std
		r.Advantage = 0
		if r.Status != pipeline.StatusOK {
			continue
		}
		base := g.Mean
		if rule.LeaveOneOut {
			base = 0
			if n := len(rewards); n > 1 {
				base = (sum - r.Reward) / float64(n-1)
			}
		}
		r.Advantage = (r.Reward - base) / (g.Std + Epsilon)
	}

	g.Kept, g.FilterReason = true, ""
	switch {
	case rule.Keep == "all" && !rule.DropErrors:
	case failed > 0 && hasError(g):
		g.Kept, g.FilterReason = false, ReasonError
	case rule.Keep == "all":
	case failed > 0:
		g.Kept, g.FilterReason = false, ReasonError
	case rule.Keep == "nonzero_std":
		if rule.allSame(g) {
			g.Kept, g.FilterReason = false, ReasonZeroStd
		}
	case rule.Keep == "mean_in":
		if g.Mean < rule.Lo || g.Mean > rule.Hi {
			g.Kept, g.FilterReason = false, ReasonMeanOut
		}
	}
	for _, r := range g.Rollouts {
		r.Kept = g.Kept
		r.FilterReason = g.FilterReason
		if !g.Kept && r.Status == pipeline.StatusOK {
			r.Status = pipeline.StatusFiltered
		}
	}
}

// hasError reports whether a member of g resolved as an error.
func hasError(g *pipeline.Group) bool {
	for _, r := range g.Rollouts {
		if r.Status == pipeline.StatusError {
			return true
		}
	}
	return false
}

// Value is a member's value under nonzero_std: its reward, or its value
// of the rule's metric (NaN when it has none).
func (rule Rule) Value(r *pipeline.Rollout) float64 {
	if rule.Metric == "" {
		return r.Reward
	}
	v, ok := r.Metrics[rule.Metric]
	if !ok {
		return math.NaN()
	}
	return v
}

// allSame reports whether every member has the same reward (or value of
// the rule's metric; a missing metric counts as its own value).
func (rule Rule) allSame(g *pipeline.Group) bool {
	first := rule.Value(g.Rollouts[0])
	for _, r := range g.Rollouts[1:] {
		v := rule.Value(r)
		if v != first && !(math.IsNaN(v) && math.IsNaN(first)) {
			return false
		}
	}
	return true
}

func meanStd(xs []float64) (mean, std float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1))
}

// Collector gathers rollouts into groups.
type Collector struct {
	pending map[pipeline.GroupKey]*pipeline.Group
}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{pending: make(map[pipeline.GroupKey]*pipeline.Group)}
}

// Add adds a resolved rollout. It returns the group once all GroupSize
// members are in (ordered by rollout index), and forgets it. A second
// rollout with the same index is an error (a pipeline bug).
func (c *Collector) Add(r *pipeline.Rollout) (*pipeline.Group, error) {
	k := r.GroupKey()
	g := c.pending[k]
	if g == nil {
		g = &pipeline.Group{Key: k, Rollouts: make([]*pipeline.Rollout, r.GroupSize)}
		c.pending[k] = g
	}
	if r.RolloutIndex < 0 || r.RolloutIndex >= len(g.Rollouts) {
		return nil, fmt.Errorf("%s: rollout index outside group of %d", r, len(g.Rollouts))
	}
	if g.Rollouts[r.RolloutIndex] != nil {
		return nil, fmt.Errorf("%s: resolved twice", r)
	}
	g.Rollouts[r.RolloutIndex] = r
	for _, m := range g.Rollouts {
		if m == nil {
			return nil, nil
		}
	}
	delete(c.pending, k)
	return g, nil
}

// Held returns the members of k's group collected so far (nil where one
// is still out), or nil when the group is not pending.
func (c *Collector) Held(k pipeline.GroupKey) []*pipeline.Rollout {
	if g := c.pending[k]; g != nil {
		return g.Rollouts
	}
	return nil
}

// Pending is the number of groups with members still out.
func (c *Collector) Pending() int { return len(c.pending) }
