package groups_test

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/groups"
)

// verlRow is one step row of a verl-agent batch: what
// TrajectoryCollector gathers for a step of an active environment.
type verlRow struct {
	uid, traj     int // the episode group (index) and the trajectory
	reward        float64
	valid         bool
	anchor        any // anchor_obs as the environment hands it over
	episodeReward float64
}

// verlGiGPO recomputes, row by row, what verl-agent's trainer computes
// for a GiGPO batch: compute_step_discounted_returns over each
// trajectory's rewards, apply_invalid_action_penalty on the returns and
// the episode scores, then compute_gigpo_outcome_advantage
// (episode_norm_reward across steps, build_step_group by to_hashable,
// step_norm_reward, episode + w × step). It shares no code with
// groups.StepStats.
func verlGiGPO(rows []verlRow, gamma, coef, w float64, mode string) (ret, epAdv, stepAdv, joint []float64) {
	n := len(rows)
	ret = make([]float64, n)
	// compute_step_discounted_returns: per trajectory, from its end.
	for i := n - 1; i >= 0; i-- {
		running := 0.0
		for j := i + 1; j < n; j++ {
			if rows[j].traj == rows[i].traj {
				running = ret[j]
				break
			}
		}
		ret[i] = rows[i].reward + gamma*running
	}
	// apply_invalid_action_penalty: token_level_scores and step_rewards.
	scores := make([]float64, n)
	for i, r := range rows {
		inv := 0.0
		if !r.valid {
			inv = 1
		}
		scores[i] = r.episodeReward - coef*inv
		ret[i] -= coef * inv
	}
	removeStd := mode == "mean_norm"
	torchStd := func(xs []float64) float64 { // unbiased, as torch.std
		m := 0.0
		for _, x := range xs {
			m += x
		}
		m /= float64(len(xs))
		ss := 0.0
		for _, x := range xs {
			ss += (x - m) * (x - m)
		}
		return math.Sqrt(ss / float64(len(xs)-1))
	}
	mean := func(xs []float64) float64 {
		m := 0.0
		for _, x := range xs {
			m += x
		}
		return m / float64(len(xs))
	}
	norm := func(x, m, s float64) float64 {
		if removeStd {
			return x - m
		}
		return (x - m) / (s + 1e-6)
	}
	// episode_norm_reward, compute_mean_std_cross_steps: every row of
	// the index counts.
	id2score := map[int][]float64{}
	for i, r := range rows {
		id2score[r.uid] = append(id2score[r.uid], scores[i])
	}
	epAdv = make([]float64, n)
	for i, r := range rows {
		xs := id2score[r.uid]
		m, s := 0.0, 1.0
		if len(xs) > 1 {
			m, s = mean(xs), torchStd(xs)
		}
		epAdv[i] = norm(scores[i], m, s)
	}
	// build_step_group: identical to_hashable(anchor) within an index.
	toHashable := func(v any) string { return fmt.Sprintf("%#v", v) }
	cluster := map[string][]float64{}
	key := make([]string, n)
	for i, r := range rows {
		key[i] = fmt.Sprint(r.uid, "|", toHashable(r.anchor))
		cluster[key[i]] = append(cluster[key[i]], ret[i])
	}
	// step_norm_reward: a cluster of one has its own score as mean, std 1.
	stepAdv = make([]float64, n)
	joint = make([]float64, n)
	for i := range rows {
		xs := cluster[key[i]]
		m, s := mean(xs), 1.0
		if len(xs) > 1 {
			s = torchStd(xs)
		}
		stepAdv[i] = norm(ret[i], m, s)
		joint[i] = epAdv[i] + w*stepAdv[i]
	}
	return ret, epAdv, stepAdv, joint
}

type fixtureStep struct {
	anchor string // JSON text
	reward float64
	valid  bool
}

// gigpoFixture is a group of four trajectories of a grid-like task,
// each solved (episode reward 1), with an invalid action, states met by
// one trajectory only, and one state written as JSON with its keys in
// another order and 1.0 for 1.
var gigpoFixture = [][]fixtureStep{
	{{`{"x":0,"y":0}`, 0, true}, {`{"x":1,"y":0}`, 0, false}, {`{"x":1,"y":1}`, 1, true}},
	{{`{"y":0,"x":0}`, 0, true}, {`{"x":0,"y":1.0}`, 0, true}, {`{"x":1,"y":1}`, 1, true}},
	{{`{"x":0,"y":0}`, 0, true}, {`{"x":2,"y":0}`, 0, true}, {`{"x":2,"y":1}`, 0, true}, {`{"x":1,"y":1}`, 1, true}},
	{{`{"x":0.0,"y":0}`, 1, true}},
}

// gigpoOneStep is a group of one trajectory of one step: its episode
// score is alone (episode_norm_reward: mean 0, std 1, so its episode
// advantage is the score itself) and so is its anchor (step_norm_reward:
// its own return as mean, std 1, so its step advantage is 0).
var gigpoOneStep = [][]fixtureStep{{{`{"x":0,"y":0}`, 1, true}}}

// TestGiGPOMatchesVerlAgent: StepStats gives every step of the fixture
// the return, step, episode and joint advantage verl-agent computes, in
// both modes and with a step_advantage_w other than 1; the fixture has
// lone anchor states, an invalid action and equal anchors spelt
// differently, where a plain (return − mean) over raw text would differ.
// A second fixture, one trajectory of one step, checks the rules for
// groups of one: episode advantage = the score, step advantage 0.
func TestGiGPOMatchesVerlAgent(t *testing.T) {
	const gamma, coef = 0.9, 0.25
	for _, fx := range []struct {
		name  string
		steps [][]fixtureStep
	}{{"grid", gigpoFixture}, {"one-step", gigpoOneStep}} {
		for _, mode := range []string{groups.StepMeanNorm, groups.StepMeanStdNorm} {
			for _, w := range []float64{1, 0.5} {
				t.Run(fmt.Sprint(fx.name, "/", mode, "/w=", w), func(t *testing.T) {
					g := &pipeline.Group{}
					var rows []verlRow
					for ti, traj := range fx.steps {
						r := &pipeline.Rollout{Status: pipeline.StatusOK}
						for _, s := range traj {
							a := s.anchor
							st := pipeline.Step{Reward: s.reward, ActionValid: s.valid, Anchor: &a}
							if !s.valid {
								st.Penalty = coef
							}
							r.Steps = append(r.Steps, st)
							r.Reward += s.reward
						}
						for _, s := range traj {
							var v any
							if err := json.Unmarshal([]byte(s.anchor), &v); err != nil {
								t.Fatal(err)
							}
							rows = append(rows, verlRow{uid: 0, traj: ti, reward: s.reward, valid: s.valid, anchor: v, episodeReward: r.Reward})
						}
						g.Rollouts = append(g.Rollouts, r)
					}
					groups.StepStats(g, groups.StepParams{Gamma: gamma, Mode: mode, W: w})
					ret, ep, step, joint := verlGiGPO(rows, gamma, coef, w, mode)
					i, lone := 0, 0
					for ri, r := range g.Rollouts {
						for si, st := range r.Steps {
							near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
							if !near(st.Return, ret[i]) || !near(st.Advantage, step[i]) || !near(st.EpisodeAdvantage, ep[i]) || !near(st.JointAdvantage, joint[i]) {
								t.Errorf("rollout %d step %d: return %v step %v episode %v joint %v; verl-agent %v %v %v %v",
									ri, si+1, st.Return, st.Advantage, st.EpisodeAdvantage, st.JointAdvantage, ret[i], step[i], ep[i], joint[i])
							}
							if st.AnchorGroupSize == 1 {
								lone++
								if st.Advantage != 0 {
									t.Errorf("rollout %d step %d alone in its anchor group: step advantage %v", ri, si+1, st.Advantage)
								}
							}
							i++
						}
					}
					if lone == 0 {
						t.Fatal("the fixture has no lone anchor step")
					}
					if fx.name == "one-step" {
						// verl-agent's rules for groups of one, written out:
						// episode (score − 0) / (1 + 1e-6) or score − 0; step 0.
						st := g.Rollouts[0].Steps[0]
						score, eps := 1.0, 1e-6
						wantEp := score
						if mode == groups.StepMeanStdNorm {
							wantEp = score / (1 + eps)
						}
						if math.Abs(st.EpisodeAdvantage-wantEp) > 1e-12 || st.Advantage != 0 || math.Abs(st.JointAdvantage-wantEp) > 1e-12 {
							t.Errorf("one-step group: episode %v step %v joint %v; verl-agent %v 0 %v", st.EpisodeAdvantage, st.Advantage, st.JointAdvantage, wantEp, wantEp)
						}
						return
					}
					// The equal states spelt differently share one anchor group.
					if a, b := g.Rollouts[0].Steps[0].AnchorGroup, g.Rollouts[3].Steps[0].AnchorGroup; a != b || g.Rollouts[0].Steps[0].AnchorGroupSize != 4 {
						t.Errorf("anchor groups %d and %d (size %d): equal JSON anchors split", a, b, g.Rollouts[0].Steps[0].AnchorGroupSize)
					}
				})
			}
		}
	}
}

// TestPenaltyKeepsRawRewards: every trajectory of the fixture solves its
// task (reward 1), one of them with an invalid action. verl-agent's
// filter_group_data compares the environment's episode rewards, so the
// group has no spread and nonzero_std drops it; the penalty shows only in
// the step rows.
func TestPenaltyKeepsRawRewards(t *testing.T) {
	g := &pipeline.Group{}
	rewards := []float64{}
	for _, traj := range gigpoFixture {
		r := &pipeline.Rollout{Status: pipeline.StatusOK}
		for _, s := range traj {
			st := pipeline.Step{Reward: s.reward, ActionValid: s.valid}
			if !s.valid {
				st.Penalty = 0.25
			}
			r.Steps = append(r.Steps, st)
			r.Reward += s.reward
		}
		rewards = append(rewards, r.Reward)
		g.Rollouts = append(g.Rollouts, r)
	}
	// verl-agent keeps a group whose episode rewards are not all equal.
	verlKeeps := false
	for _, x := range rewards {
		verlKeeps = verlKeeps || x != rewards[0]
	}
	groups.Rule{Keep: "nonzero_std"}.Apply(g)
	if g.Kept != verlKeeps || verlKeeps {
		t.Fatalf("kept %v, verl-agent keeps %v (rewards %v)", g.Kept, verlKeeps, rewards)
	}
}

func TestAnchorKey(t *testing.T) {
	same := [][2]string{
		{`{"a":1,"b":[1,2]}`, `{"b":[1.0,2e0],"a":1}`},
		{`{"a":{"c":true,"b":null}}`, ` {"a":{"b":null,"c":true}} `},
		{`1`, `1.000`},
		{"plain text", "plain text"},
	}
	for _, c := range same {
		if groups.AnchorKey(c[0]) != groups.AnchorKey(c[1]) {
			t.Errorf("%q and %q: keys differ", c[0], c[1])
		}
	}
	differ := [][2]string{
		{`{"a":1}`, `{"a":"1"}`},
		{`"1"`, `1`},
		{`[1,2]`, `[2,1]`},
		{"text", " text"},
		{`{"a":1}`, `{"a":1} trailing`},
		{`1`, `1 2`},
	}
	for _, c := range differ {
		if groups.AnchorKey(c[0]) == groups.AnchorKey(c[1]) {
			t.Errorf("%q and %q: same key", c[0], c[1])
		}
	}
}

func FuzzAnchorKey(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1,2.0]`, "text", `"x"`, `1e400`, `{"a":`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k := groups.AnchorKey(s)
		if groups.AnchorKey(s) != k {
			t.Fatal("not deterministic")
		}
		var v any
		if json.Unmarshal([]byte(s), &v) == nil {
			b, _ := json.Marshal(v)
			if groups.AnchorKey(string(b)) != k {
				t.Fatalf("%q and its re-encoding %s: keys differ", s, b)
			}
		}
	})
}
