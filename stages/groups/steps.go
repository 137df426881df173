package groups

import (
	"bytes"
	"encoding/json"
	"math"
	"sort"
	"strconv"

	"github.com/trajflow/trajflow/pipeline"
)

// The step_advantage modes (GiGPO's mode).
const (
	StepMeanNorm    = "mean_norm"
	StepMeanStdNorm = "mean_std_norm"
)

// stepEpsilon is GiGPO's epsilon in (x − mean) / (std + epsilon).
const stepEpsilon = 1e-6

// DefaultStepAdvantageW is groups.step_advantage_w's default (GiGPO's
// step_advantage_w).
const DefaultStepAdvantageW = 1.0

// StepParams are the GiGPO settings of the groups section.
type StepParams struct {
	// Gamma discounts the returns.
	Gamma float64
	// Mode is StepMeanNorm (subtract the mean) or StepMeanStdNorm (and
	// divide by std + 1e-6); it applies to the episode and the step
	// advantages alike.
	Mode string
	// W weighs the step advantage in the joint advantage.
	W float64
}

// StepParamsOf returns the GiGPO settings of a defaulted groups section.
func StepParamsOf(c Config) StepParams {
	p := StepParams{Gamma: DefaultGamma, Mode: c.StepAdvantage, W: DefaultStepAdvantageW}
	if c.Gamma != nil {
		p.Gamma = *c.Gamma
	}
	if c.StepAdvantageW != nil {
		p.W = *c.StepAdvantageW
	}
	return p
}

// StepStats fills the GiGPO statistics of every step of g's rollouts
// that resolved ok (their Steps, one per turn), as verl-agent's
// compute_gigpo_outcome_advantage computes them:
//
//   - Return: the discounted return from the step on, with gamma, over the
//     environment's step rewards (compute_step_discounted_returns), less
//     the step's invalid-action Penalty (apply_invalid_action_penalty,
//     which runs after the returns are computed);
//   - AnchorGroup: steps of g whose anchors are equal share a number, 0,
//     1, … in order of first appearance (rollout index, then step); a step
//     without an anchor has -1 and is an anchor group of its own. Anchors
//     that are JSON compare as values (object keys in any order, 1 and
//     1.0 alike), as GiGPO's to_hashable compares them; others as text;
//   - AnchorGroupSize, AnchorMean, AnchorStd: the anchor group's size and
//     its returns' mean and sample standard deviation; a group of one has
//     its own return as mean and std 1 (step_norm_reward), so its step
//     advantage is 0;
//   - Advantage: return − mean (mean_norm), or (return − mean) / (std +
//     1e-6) (mean_std_norm);
//   - EpisodeAdvantage: the step's episode score (its rollout's reward
//     less the step's Penalty) normalised over the scores of every step
//     of the group, the same way (episode_norm_reward, mean and std
//     across steps); a group with one step in all has mean 0 and std 1;
//   - JointAdvantage: EpisodeAdvantage + W × Advantage.
func StepStats(g *pipeline.Group, p StepParams) {
	type member struct{ r, s int }
	byAnchor := map[string]int{}
	var members [][]member
	var scores []float64
	for ri, r := range g.Rollouts {
		if r == nil || r.Status != pipeline.StatusOK {
			continue
		}
		next := 0.0
		for si := len(r.Steps) - 1; si >= 0; si-- {
			st := &r.Steps[si]
			next = st.Reward + p.Gamma*next
			st.Return = next
		}
		for si := range r.Steps {
			st := &r.Steps[si]
			st.Return -= st.Penalty
			scores = append(scores, r.Reward-st.Penalty)
			st.AnchorGroup = -1
			if st.Anchor == nil {
				st.AnchorGroupSize, st.AnchorMean, st.AnchorStd = 1, st.Return, 1
				st.Advantage = normalise(st.Return, st.Return, 1, p.Mode)
				continue
			}
			key := AnchorKey(*st.Anchor)
			k, ok := byAnchor[key]
			if !ok {
				k = len(members)
				byAnchor[key] = k
				members = append(members, nil)
			}
			st.AnchorGroup = k
			members[k] = append(members[k], member{ri, si})
		}
	}
	returns := make([]float64, 0, 8)
	for _, ms := range members {
		returns = returns[:0]
		for _, m := range ms {
			returns = append(returns, g.Rollouts[m.r].Steps[m.s].Return)
		}
		mean, std := returns[0], 1.0
		if len(returns) > 1 {
			mean, std = meanStd(returns)
		}
		for _, m := range ms {
			st := &g.Rollouts[m.r].Steps[m.s]
			st.AnchorGroupSize, st.AnchorMean, st.AnchorStd = len(ms), mean, std
			st.Advantage = normalise(st.Return, mean, std, p.Mode)
		}
	}
	emean, estd := 0.0, 1.0
	if len(scores) > 1 {
		emean, estd = meanStd(scores)
	}
	for _, r := range g.Rollouts {
		if r == nil || r.Status != pipeline.StatusOK {
			continue
		}
		for si := range r.Steps {
			st := &r.Steps[si]
			st.EpisodeAdvantage = normalise(r.Reward-st.Penalty, emean, estd, p.Mode)
			st.JointAdvantage = st.EpisodeAdvantage + p.W*st.Advantage
		}
	}
}

func normalise(x, mean, std float64, mode string) float64 {
	if mode == StepMeanStdNorm {
		return (x - mean) / (std + stepEpsilon)
	}
	return x - mean
}

// AnchorKey is the key anchors are grouped by: a JSON anchor's canonical
// form (object keys sorted, numbers as the shortest decimal of their
// float64 value, so that 1 and 1.0 are equal), or the text itself when it
// is not JSON.
func AnchorKey(anchor string) string {
	d := json.NewDecoder(bytes.NewReader([]byte(anchor)))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return "t" + anchor
	}
	var b bytes.Buffer
	b.WriteByte('j')
	if !canonical(&b, v) {
		return "t" + anchor
	}
	return b.String()
}

func canonical(b *bytes.Buffer, v any) bool {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case string:
		q, _ := json.Marshal(x)
		b.Write(q)
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil || math.IsInf(f, 0) {
			b.WriteString(string(x))
			return true
		}
		b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if !canonical(b, e) {
				return false
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			q, _ := json.Marshal(k)
			b.Write(q)
			b.WriteByte(':')
			if !canonical(b, x[k]) {
				return false
			}
		}
		b.WriteByte('}')
	default:
		return false
	}
	return true
}
