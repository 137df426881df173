package repeat

import (
	"github.com/trajflow/trajflow/pipeline"
	"go.yaml.in/yaml/v3"
)

// Config is the repeat section: how each task expands into a group.
type Config struct {
	// N is the number of rollouts per task (the group size). Left out, it
	// is 1; written as 0 it is an error (see UnmarshalYAML).
	N int `yaml:"n"`
	// Seed is the base seed.
	Seed int64 `yaml:"seed"`
	// SeedMode is offset (seed + rollout_index, attempts shifted by n) or
	// hash (a hash of seed, task_index, attempt and rollout_index).
	SeedMode string `yaml:"seed_mode"`
	// OverrideRowSeed sends the rollout's seed even to a row that carries
	// its own (a seed in its responses_create_params). Left false, such a
	// row's seed is kept and sent on each of its rollouts.
	// (omitempty: the fingerprints of outputs made before the key stay.)
	OverrideRowSeed bool `yaml:"override_row_seed" json:",omitempty"`

	// nSet records that a config file wrote n, so that an explicit 0 is
	// not mistaken for "unset".
	nSet bool
}

// UnmarshalYAML decodes the section and records whether it wrote n: an
// explicit "n: 0" is then an error instead of becoming the default.
func (c *Config) UnmarshalYAML(n *yaml.Node) error {
	type plain Config
	if err := n.Decode((*plain)(c)); err != nil {
		return err
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "n" {
				c.nSet = true
			}
		}
	}
	return nil
}

// SetDefaults fills the keys left unset. A zero N that a config wrote
// stays zero, for Validate to reject.
func (c *Config) SetDefaults() {
	if c.N == 0 && !c.nSet {
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
		p.Add("n", "must be >= 1, got %d (leave n out for the default, 1)", c.N)
	}
	p.OneOf("seed_mode", c.SeedMode, SeedOffset, SeedHash)
	return p.Err()
}
