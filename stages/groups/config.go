package groups

import (
	"math"

	"github.com/trajflow/trajflow/pipeline"
)

// Config is the groups section: group statistics, the keep rule and the
// dynamic-sampling target.
type Config struct {
	// Keep is the keep rule: all, nonzero_std (drop the groups whose
	// members all have the same reward, or the same Metric) or mean_in
	// (keep the groups whose mean reward is within MeanIn).
	Keep string `yaml:"keep"`
	// Metric, when set, is the metric nonzero_std compares instead of the
	// reward (e.g. acc).
	Metric string `yaml:"metric"`
	// MeanIn is [lo, hi] for keep: mean_in (inclusive).
	MeanIn []float64 `yaml:"mean_in"`
	// Baseline is mean or leave_one_out: the advantage is
	// (reward − baseline) / (std + 1e-6).
	Baseline string `yaml:"baseline"`
	// Target stops the run once this many groups are kept, exactly that
	// many (0: no target); see docs/dynamic-sampling.md.
	Target int `yaml:"target"`
	// OnTarget is what happens to the groups in flight when the target is
	// reached: cancel (their requests are aborted) or drain (finish them
	// and write them to surplus/).
	OnTarget string `yaml:"on_target"`
	// MaxAttempts is how many times a task whose group was dropped is
	// sampled (1: once), with new seeds each attempt.
	MaxAttempts int `yaml:"max_attempts"`
	// Resample is same_task (a dropped task gets another attempt with new
	// seeds, up to max_attempts, while new tasks are read), next_task
	// (move on) or batch (verl-agent's dynamic sampling,
	// dynamic_multi_turn_loop: the input is the batch; once it is read
	// and every group finished short of the target, every task of it is
	// sampled again with new seeds, kept ones included, up to
	// max_attempts rounds, max_num_gen_batches; needs a target).
	Resample string `yaml:"resample"`
	// SampleRetries is how many times one failed rollout is tried again on
	// its own (new seed, same key) before it counts as failed, instead of
	// losing its group.
	SampleRetries int `yaml:"sample_retries"`
	// MaxInflight bounds the groups in flight.
	//
	// Default: derived: with a target, generate.concurrency / repeat.n
	// (every group started beyond the need is waste); otherwise twice what
	// the generate and env slots hold.
	MaxInflight int `yaml:"max_inflight"`
	// MaxRollouts bounds the rollouts in flight in the generate ⇄ env
	// loop, from their admission to their resolution, whether they wait
	// for the model or for their environment (NeMo Gym's
	// num_samples_in_parallel); 0: generate.concurrency plus the env
	// concurrency.
	MaxRollouts int `yaml:"max_rollouts"`
	// Order is completion (a group is committed as soon as it finishes)
	// or task (groups are committed in the order their tasks were read:
	// a group waits until every earlier task is resolved, so that the
	// kept set under a target is the first passing groups in task order,
	// the same in every run; docs/dynamic-sampling.md).
	Order string `yaml:"order"`
	// OnExhausted is what a run short of its target does when the input
	// ends: exit (commit what was kept, exit code 3) or keep_unfiltered
	// (fill up to the target with the last attempts of tasks the keep
	// rule dropped, committed without the rule and marked filter_reason:
	// unfiltered:REASON, as verl-agent's last try, and exit 0, or 3 if even
	// they fall short); see docs/dynamic-sampling.md.
	OnExhausted string `yaml:"on_exhausted"`
	// CancelUndecided, under a target with keep: nonzero_std, order:
	// completion and on_target: cancel, cancels the groups in flight whose
	// outcome is still open as soon as the kept groups and the groups in
	// flight already decided (two members of different values: kept
	// unless a member fails) hold the target, rather than letting them
	// decode until the target is reached (docs/dynamic-sampling.md).
	CancelUndecided *bool `yaml:"cancel_undecided"`
	// CancelUndecidedSpare delays cancel_undecided until the kept and
	// the decided groups hold the target plus this many spare groups:
	// the first K of them to finish are kept, and a decided group whose
	// last member runs long is cancelled at the target rather than
	// waited for (docs/dynamic-sampling.md). Unset: K/32 rounded to
	// the nearest (SparePer), 2 at K=64 and 8 at K=256, none below
	// K=16; 0 cancels as soon as they hold the target.
	CancelUndecidedSpare *int `yaml:"cancel_undecided_spare"`

	// Gamma discounts the step rows' returns (step_return), as
	// verl-agent's gamma (1: no discount; with output.steps).
	Gamma *float64 `yaml:"gamma"`
	// StepAdvantage is GiGPO's normalisation (verl-agent's
	// algorithm.gigpo.mode), of a step's return within its anchor group
	// (step_advantage) and of its episode score within the group
	// (episode_advantage) alike: mean_norm subtracts the mean (the
	// default), mean_std_norm subtracts the mean and divides by the
	// sample standard deviation + 1e-6.
	StepAdvantage string `yaml:"step_advantage"`
	// StepAdvantageW weighs the step advantage in the step rows'
	// joint_advantage = episode_advantage + step_advantage_w ×
	// step_advantage (verl-agent's algorithm.gigpo.step_advantage_w);
	// default 1.
	StepAdvantageW *float64 `yaml:"step_advantage_w"`
}

// ResampleBatch is groups.resample: batch.
const ResampleBatch = "batch"

// SparePer is the kept groups of the target per spare decided group
// that groups.cancel_undecided_spare holds when unset: the decided groups
// whose last member runs long grow in number with the target.
const SparePer = 32

// Spare is groups.cancel_undecided_spare's value for target: the key's,
// or one spare per SparePer kept groups (rounded to the nearest) when
// unset.
func (c *Config) Spare() int {
	if c.CancelUndecidedSpare != nil {
		return max(*c.CancelUndecidedSpare, 0)
	}
	return (c.Target + SparePer/2) / SparePer
}

// DefaultGamma is groups.gamma's default.
const DefaultGamma = 1.0

// SetDefaults fills the keys left unset.
func (c *Config) SetDefaults() {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&c.Keep, "all")
	def(&c.Baseline, "mean")
	def(&c.OnTarget, "cancel")
	def(&c.Resample, "same_task")
	def(&c.Order, "completion")
	def(&c.OnExhausted, "exit")
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 1
	}
	if c.CancelUndecided == nil {
		v := true
		c.CancelUndecided = &v
	}
	if c.Gamma == nil {
		g := DefaultGamma
		c.Gamma = &g
	}
	def(&c.StepAdvantage, StepMeanNorm)
	if c.StepAdvantageW == nil {
		w := DefaultStepAdvantageW
		c.StepAdvantageW = &w
	}
}

// Upper bounds of the section's counts: groups in flight are held in
// memory, and attempts and retries repeat work.
const (
	MaxAttempts       = 1000
	MaxSampleRetries  = 100
	MaxInflightGroups = 1 << 16
)

// Validate reports every problem of the section at once.
func (c *Config) Validate() error {
	var p pipeline.Problems
	p.OneOf("keep", c.Keep, "all", "nonzero_std", "mean_in")
	p.OneOf("baseline", c.Baseline, "mean", "leave_one_out")
	if c.Keep == "mean_in" {
		if len(c.MeanIn) != 2 || c.MeanIn[0] > c.MeanIn[1] {
			p.Add("mean_in", "want [lo, hi] with lo <= hi, got %v", c.MeanIn)
		}
	} else if len(c.MeanIn) > 0 {
		p.Add("mean_in", "set, but groups.keep is %q (want mean_in)", c.Keep)
	}
	if c.Target < 0 {
		p.Add("target", "must be >= 0, got %d", c.Target)
	}
	p.OneOf("on_target", c.OnTarget, "cancel", "drain")
	p.OneOf("resample", c.Resample, "same_task", "next_task", ResampleBatch)
	if c.Resample == ResampleBatch && c.Target == 0 {
		p.Add("resample", "batch samples the input again until groups.target groups are kept, but no target is set")
	}
	p.OneOf("order", c.Order, "completion", "task")
	p.OneOf("on_exhausted", c.OnExhausted, "exit", "keep_unfiltered")
	if c.OnExhausted == "keep_unfiltered" && c.Target == 0 {
		p.Add("on_exhausted", "keep_unfiltered fills up to groups.target, but no target is set")
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > MaxAttempts {
		p.Add("max_attempts", "must be between 1 and %d, got %d", MaxAttempts, c.MaxAttempts)
	}
	if c.SampleRetries < 0 || c.SampleRetries > MaxSampleRetries {
		p.Add("sample_retries", "must be between 0 and %d, got %d", MaxSampleRetries, c.SampleRetries)
	}
	if c.MaxInflight < 0 || c.MaxInflight > MaxInflightGroups {
		p.Add("max_inflight", "must be between 0 (automatic) and %d, got %d", MaxInflightGroups, c.MaxInflight)
	}
	if v := c.CancelUndecidedSpare; v != nil && *v < 0 {
		p.Add("cancel_undecided_spare", "must be >= 0, got %d", *v)
	}
	if c.MaxRollouts < 0 {
		p.Add("max_rollouts", "must be >= 0, got %d", c.MaxRollouts)
	}
	if c.Gamma != nil && !(*c.Gamma >= 0 && *c.Gamma <= 1) {
		p.Add("gamma", "must be in [0, 1], got %v", *c.Gamma)
	}
	if w := c.StepAdvantageW; w != nil && (math.IsNaN(*w) || math.IsInf(*w, 0)) {
		p.Add("step_advantage_w", "must be a finite number, got %v", *w)
	}
	if c.StepAdvantage != "" {
		p.OneOf("step_advantage", c.StepAdvantage, StepMeanNorm, StepMeanStdNorm)
	}
	return p.Err()
}
