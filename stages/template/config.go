package template

import (
	"github.com/trajflow/trajflow/pipeline"
)

// Config is the prompt section: templates that render messages from row
// fields. Leave it empty when rows carry their own messages.
type Config struct {
	System string `yaml:"system"`
	User   string `yaml:"user"`
	// MessagesField names a row field holding OpenAI messages (default
	// "messages"; NeMo Gym rows' responses_create_params.input is always read).
	MessagesField string `yaml:"messages_field"`
	// OverrideRowInput lets the templates replace the messages a row
	// carries (NeMo Gym's responses_create_params.input, or its messages
	// field). Without it a template meeting such a row is an error naming
	// both, as NeMo Gym refuses the combination.
	OverrideRowInput bool `yaml:"override_row_input"`
}

// SetDefaults fills the keys left unset.
func (c *Config) SetDefaults() {
	if c.MessagesField == "" {
		c.MessagesField = "messages"
	}
}

// Validate parses the templates and reports every problem at once, each
// naming its key relative to the section (user, system).
func (c *Config) Validate() error {
	var p pipeline.Problems
	_, err := New(*c)
	p.Section("", err)
	return p.Err()
}
