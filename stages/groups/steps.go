package groups

import (
	"math"

	"github.com/trajflow/trajflow/pipeline"
)

// The step_advantage modes (GiGPO's step_norm_reward).
const (
	StepMeanNorm    = "mean_norm"
	StepMeanStdNorm = "mean_std_norm"
)

// stepEpsilon is GiGPO's epsilon in (return − mean) / (std + epsilon).
const stepEpsilon = 1e-6

// StepStats fills the GiGPO statistics of every step of g's rollouts
// that resolved ok (their Steps, one per turn):
//
//   - Return: the discounted return from the step on, with gamma, over the
//     step rewards (GiGPO's compute_step_discounted_returns);
//   - AnchorGroup: steps of g whose anchors are equal share a number, 0,
//     1, … in order of first appearance (rollout index, then step); a step
//     without an anchor has -1 and is an anchor group of its own;
//   - AnchorGroupSize, AnchorMean, AnchorStd: the anchor group's size and
//     its returns' mean and sample standard deviation; a group of one has
//     mean 0 and std 1, as GiGPO's step_norm_reward takes them;
//   - Advantage: return − mean (mean_norm), or (return − mean) / (std +
//     1e-6) (mean_std_norm).
func StepStats(g *pipeline.Group, gamma float64, mode string) {
	type member struct{ r, s int }
	byAnchor := map[string]int{}
	var members [][]member
	for ri, r := range g.Rollouts {
		if r == nil || r.Status != pipeline.StatusOK {
			continue
		}
		next := 0.0
		for si := len(r.Steps) - 1; si >= 0; si-- {
			st := &r.Steps[si]
			next = st.Reward + gamma*next
			st.Return = next
		}
		for si := range r.Steps {
			st := &r.Steps[si]
			st.AnchorGroup = -1
			if st.Anchor == nil {
				st.AnchorGroupSize, st.AnchorMean, st.AnchorStd = 1, 0, 1
				st.Advantage = advantage(st.Return, 0, 1, mode)
				continue
			}
			k, ok := byAnchor[*st.Anchor]
			if !ok {
				k = len(members)
				byAnchor[*st.Anchor] = k
				members = append(members, nil)
			}
			st.AnchorGroup = k
			members[k] = append(members[k], member{ri, si})
		}
	}
	for _, ms := range members {
		n := len(ms)
		mean, std := 0.0, 1.0
		if n > 1 {
			sum := 0.0
			for _, m := range ms {
				sum += g.Rollouts[m.r].Steps[m.s].Return
			}
			mean = sum / float64(n)
			ss := 0.0
			for _, m := range ms {
				d := g.Rollouts[m.r].Steps[m.s].Return - mean
				ss += d * d
			}
			std = math.Sqrt(ss / float64(n-1))
		}
		for _, m := range ms {
			st := &g.Rollouts[m.r].Steps[m.s]
			st.AnchorGroupSize, st.AnchorMean, st.AnchorStd = n, mean, std
			st.Advantage = advantage(st.Return, mean, std, mode)
		}
	}
}

func advantage(ret, mean, std float64, mode string) float64 {
	if mode == StepMeanStdNorm {
		return (ret - mean) / (std + stepEpsilon)
	}
	return ret - mean
}
