package groups

import "github.com/trajflow/trajflow/pipeline"

// Config is the groups section: group statistics, the keep rule and the
// dynamic-sampling target.
type Config struct {
	// Keep is all, nonzero_std or mean_in.
	Keep string `yaml:"keep"`
	// Metric, when set, is the metric nonzero_std compares instead of the reward.
	Metric string `yaml:"metric"`
	// MeanIn is [lo, hi] for keep: mean_in.
	MeanIn []float64 `yaml:"mean_in"`
	// Baseline is mean or leave_one_out.
	Baseline string `yaml:"baseline"`
	// Target ends the run once this many groups are kept (0: no target).
	Target int `yaml:"target"`
	// OnTarget is cancel (abort what is in flight when the target is
	// reached) or drain (finish it and write it to the surplus directory).
	OnTarget string `yaml:"on_target"`
	// MaxAttempts is how many times a task whose group was dropped is
	// sampled (1: once).
	MaxAttempts int `yaml:"max_attempts"`
	// Resample is same_task (a dropped task gets another attempt with new
	// seeds, up to max_attempts) or next_task (move on).
	Resample string `yaml:"resample"`
	// SampleRetries is how many times one failed rollout is tried again on
	// its own before it counts as failed.
	SampleRetries int `yaml:"sample_retries"`
	// MaxInflight bounds the groups in flight (0: derived from the
	// generate and env concurrency).
	MaxInflight int `yaml:"max_inflight"`
	// Order is completion (a group is committed as soon as it finishes)
	// or task (groups are committed in the order their tasks were read:
	// a group waits until every earlier task is resolved, so that the
	// kept set under a target is the first passing groups in task order,
	// the same in every run).
	Order string `yaml:"order"`
	// OnExhausted is what a run short of its target does when the input
	// ends: exit (commit what was kept, exit code 3) or keep_unfiltered
	// (fill up to the target with the last attempts of tasks the keep
	// rule dropped, committed without the rule and marked).
	OnExhausted string `yaml:"on_exhausted"`

	// Gamma discounts the step rows' returns (step_return), as
	// verl-agent's gamma; default 1 (no discount).
	Gamma *float64 `yaml:"gamma"`
	// StepAdvantage is how GiGPO normalises a step's return within its
	// anchor group: mean_norm (return − mean, verl-agent's default) or
	// mean_std_norm ((return − mean) / (std + 1e-6)).
	StepAdvantage string `yaml:"step_advantage"`
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
	if c.Gamma == nil {
		g := DefaultGamma
		c.Gamma = &g
	}
	def(&c.StepAdvantage, StepMeanNorm)
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
	p.OneOf("resample", c.Resample, "same_task", "next_task")
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
	if c.Gamma != nil && !(*c.Gamma >= 0 && *c.Gamma <= 1) {
		p.Add("gamma", "must be in [0, 1], got %v", *c.Gamma)
	}
	if c.StepAdvantage != "" {
		p.OneOf("step_advantage", c.StepAdvantage, StepMeanNorm, StepMeanStdNorm)
	}
	return p.Err()
}
