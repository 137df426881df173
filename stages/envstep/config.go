package envstep

import "github.com/trajflow/trajflow/pipeline"

// Config is the env section: which environment steps the trajectories, its
// own options, and the scheduling keys that bound a trajectory.
type Config struct {
	// Name is the environment's registered name.
	Name string `yaml:"name"`
	// MaxTurns bounds the turns of one trajectory (0: no bound, as in
	// NeMo RL: the environment, max_seq_len or the timeout ends it).
	MaxTurns int `yaml:"max_turns"`
	// MaxSeqLen bounds a trajectory's tokens, exactly (0: no bound). The
	// generate stage enforces it.
	MaxSeqLen int `yaml:"max_seq_len"`
	// Concurrency bounds environment steps in flight.
	Concurrency int `yaml:"concurrency"`
	// TurnTimeout and Timeout bound one step and one trajectory.
	TurnTimeout pipeline.Duration `yaml:"turn_timeout"`
	Timeout     pipeline.Duration `yaml:"timeout"`
	// Options are the environment's own keys (e.g. answer_field); the
	// environment's factory checks them.
	Options map[string]any `yaml:",inline"`
}

// SetDefaults fills the keys left unset.
func (c *Config) SetDefaults() {
	if c.Name == "" {
		c.Name = "math"
	}
	if c.Concurrency == 0 {
		c.Concurrency = 64
	}
}

// Validate reports every problem of the scheduling keys at once. The
// environment's name and options are checked by whoever resolves the name
// to an environment.
func (c *Config) Validate() error {
	var p pipeline.Problems
	if c.MaxTurns < 0 {
		p.Add("max_turns", "must be >= 0 (0: no limit), got %d", c.MaxTurns)
	}
	if c.MaxSeqLen < 0 {
		p.Add("max_seq_len", "must be >= 0, got %d", c.MaxSeqLen)
	}
	if c.Concurrency < 1 {
		p.Add("concurrency", "must be >= 1, got %d", c.Concurrency)
	}
	return p.Err()
}

// Limits returns the per-trajectory limits the stage enforces.
func (c *Config) Limits() Limits {
	return Limits{MaxTurns: c.MaxTurns, TurnTimeout: c.TurnTimeout.D()}
}
