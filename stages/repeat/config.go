package repeat

import "github.com/trajflow/trajflow/pipeline"

// Config is the repeat section: how each task expands into a group.
type Config struct {
	// N is the number of rollouts per task (the group size).
	N int `yaml:"n"`
	// Seed is the base seed.
	Seed int64 `yaml:"seed"`
	// SeedMode is offset (seed + rollout_index, attempts shifted by n) or
	// hash (a hash of seed, task_index, attempt and rollout_index).
	SeedMode string `yaml:"seed_mode"`
}

// SetDefaults fills the keys left unset.
func (c *Config) SetDefaults() {
	if c.N == 0 {
		c.N = 1
	}
	if c.SeedMode == "" {
		c.SeedMode = SeedOffset
	}
}

// Validate reports every problem of the section at once.
func (c *Config) Validate() error {
	var p pipeline.Problems
	if c.N < 1 {
		p.Add("n", "must be >= 1, got %d", c.N)
	}
	p.OneOf("seed_mode", c.SeedMode, SeedOffset, SeedHash)
	return p.Err()
}
