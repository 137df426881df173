package repeat

import (
	"github.com/trajflow/trajflow/pipeline"
	"go.yaml.in/yaml/v3"
)

// Config is the repeat section: how each task expands into a group.
type Config struct {
	// N is the number of rollouts per task (the group size), in aabbcc
	// order. Left out, it is 1; written as 0 it is an error. At most MaxN
	// (65536).
	N int `yaml:"n"`
	// Seed is the base seed. A seed is sent with each request only when
	// one is configured (a config that writes seed, 0 included; from Go, a
	// non-zero Seed or SetSeed) or the row carries its own; otherwise no
	// seed is sent.
	//
	// Default: none.
	Seed int64 `yaml:"seed"`
	// SeedMode is offset (seed + attempt·n + rollout_index) or hash (a hash
	// of seed, task_index, attempt and rollout_index).
	SeedMode string `yaml:"seed_mode"`
	// OverrideRowSeed sends the rollout's seed even to a row that carries
	// its own integer seed (in its responses_create_params). Left false,
	// such a row's seed is kept and sent on each of its rollouts.
	OverrideRowSeed bool `yaml:"override_row_seed" json:",omitempty"` // omitempty: the fingerprints of outputs made before the key stay
	// AddSeed writes each rollout's seed into the responses_create_params
	// trajflow sends to a NeMo Gym resources server (/seed_session,
	// /verify) and writes in output.jsonl, as NeMo Gym's rollout
	// collection does with num_repeats_add_seed, but in another place:
	// in metadata.extra_body, a JSON string ({"seed": N} merged into the
	// one there), not at the top level where Gym's rollout collection
	// writes it, since newer Gym's responses_create_params forbid keys
	// they do not declare and declare no seed. Left false, the seed is in
	// neither (it is still sent to the model when configured, and is in
	// the seed column).
	AddSeed bool `yaml:"add_seed" json:",omitempty"` // omitempty: the fingerprints of outputs made before the key stay
	// nSet records that a config file wrote n, so that an explicit 0 is
	// not mistaken for "unset".
	nSet bool
	// seedSet records that a config file wrote seed (seed: 0 included).
	seedSet bool
}

// SeedConfigured reports whether a seed is configured: a config file wrote
// seed (0 included), SetSeed was called, or Seed is non-zero.
func (c *Config) SeedConfigured() bool { return c.seedSet || c.Seed != 0 }

// SetSeed configures the base seed, 0 included.
func (c *Config) SetSeed(seed int64) { c.Seed, c.seedSet = seed, true }

// UnmarshalYAML decodes the section and records whether it wrote n: an
// explicit "n: 0" is then an error instead of becoming the default.
func (c *Config) UnmarshalYAML(n *yaml.Node) error {
	type plain Config
	if err := n.Decode((*plain)(c)); err != nil {
		return err
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			switch n.Content[i].Value {
			case "n":
				c.nSet = true
			case "seed":
				c.seedSet = true
			}
		}
	}
	return nil
}

// MaxN bounds n: a group's rollouts are held in memory together.
const MaxN = 1 << 16

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
	if c.N > MaxN {
		p.Add("n", "must be at most %d, got %d (a group is held whole in memory)", MaxN, c.N)
	}
	p.OneOf("seed_mode", c.SeedMode, SeedOffset, SeedHash)
	return p.Err()
}
