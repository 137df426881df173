package sim

import "github.com/trajflow/trajflow/pipeline"

// Config is the generate.sim section: the simulated model behind sim://
// endpoints.
type Config struct {
	// Seed drives every random draw of the simulator.
	Seed int64 `yaml:"seed"`
	// Preset is the response-length model: reasoning, agent or short.
	Preset string `yaml:"preset"`
	// Accuracy is the mean probability that an answer is right; each task
	// draws its own probability around it.
	Accuracy float64 `yaml:"accuracy"`
	// TimeScale multiplies every simulated delay (0: no delay at all).
	TimeScale float64 `yaml:"time_scale"`
	// Keep is the probability that a group gets mixed correctness (1..n-1
	// correct) under the benchmark workload; -1 leaves correctness to
	// Accuracy.
	Keep float64 `yaml:"keep"`
	// Capacity is the simulated batch size B, the most requests decoding
	// at once (0: 256).
	Capacity int `yaml:"capacity"`
	// MaxModelLen, when > 0, answers requests whose prompt plus max_tokens
	// exceed it with a context-length error (0: no limit).
	MaxModelLen int `yaml:"max_model_len"`
	// Turns is [min, max], the turns per trajectory the sim trailer draws
	// from (empty: the preset's, 1..1 or 2..8 for agent).
	Turns []int `yaml:"turns"`
	// EnvDelay is the median environment delay per turn the trailer reports,
	// before time_scale (0: the preset's, 0 or 500ms for agent).
	EnvDelay pipeline.Duration `yaml:"env_delay"`
	// ObsTokens is the median observation length per turn the trailer
	// reports (0: the preset's, 0 or 150 for agent).
	ObsTokens int `yaml:"obs_tokens"`
	// StripReasoning gives the simulated chat template Qwen3's habit of
	// dropping the <think> block of earlier assistant messages (replies
	// then start with one), so chat mode sees re-renders.
	StripReasoning bool `yaml:"strip_reasoning"`
	// MoE, with layers set, makes the simulated model a mixture of
	// experts: each of its layers routes a token to top_k distinct
	// experts of experts (a hash of generate.sim.seed, the layer, the
	// position and the token id), and its answers carry the routes
	// (generate.routed_experts): vLLM's choices[].routed_experts on
	// completions, SGLang's meta_info.routed_experts on /generate
	// requests that ask. Left out: a dense model.
	MoE MoE `yaml:"moe"`
}

// SetDefaults fills the keys left unset.
func (c *Config) SetDefaults() {
	if c.Preset == "" {
		c.Preset = "short"
	}
	if c.Accuracy == 0 {
		c.Accuracy = 0.6
	}
	if c.Keep == 0 {
		c.Keep = -1
	}
}

// Validate reports every problem of the section at once.
func (c *Config) Validate() error {
	var p pipeline.Problems
	p.OneOf("preset", c.Preset, "short", "reasoning", "agent")
	if a := c.Accuracy; a < 0 || a > 1 {
		p.Add("accuracy", "must be in [0, 1], got %g", a)
	}
	if c.TimeScale < 0 {
		p.Add("time_scale", "must be >= 0, got %g", c.TimeScale)
	}
	if k := c.Keep; k != -1 && (k < 0 || k > 1) {
		p.Add("keep", "must be in [0, 1] (or -1), got %g", k)
	}
	if c.Capacity < 0 {
		p.Add("capacity", "must be >= 0, got %d", c.Capacity)
	}
	if c.MaxModelLen < 0 {
		p.Add("max_model_len", "must be >= 0, got %d", c.MaxModelLen)
	}
	if t := c.Turns; len(t) > 0 && (len(t) != 2 || t[0] < 1 || t[0] > t[1]) {
		p.Add("turns", "want [min, max] with 1 <= min <= max, got %v", t)
	}
	if c.EnvDelay < 0 {
		p.Add("env_delay", "must be >= 0, got %s", c.EnvDelay.D())
	}
	if err := c.MoE.Check(); err != nil {
		p.Add("moe", "%v", err)
	}
	if c.ObsTokens < 0 {
		p.Add("obs_tokens", "must be >= 0, got %d", c.ObsTokens)
	}
	return p.Err()
}
