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
	// MaxTokens limits the first prompt, as the server's /tokenize counts
	// it (chat template and tools included), to this many tokens; 0: no
	// limit. verl's data.max_prompt_length.
	MaxTokens int `yaml:"max_tokens"`
	// Truncation says what a longer prompt becomes (verl's data.truncation):
	// left keeps its last MaxTokens ids, right its first, middle its first
	// MaxTokens/2 and last MaxTokens-MaxTokens/2; error fails the row. left,
	// right and middle send ids, so they need generate.api: tokens. Default
	// error (when MaxTokens is set).
	Truncation string `yaml:"truncation"`
}

// Truncation modes.
const (
	TruncLeft   = "left"
	TruncRight  = "right"
	TruncMiddle = "middle"
	TruncError  = "error"
)

// SetDefaults fills the keys left unset.
func (c *Config) SetDefaults() {
	if c.MessagesField == "" {
		c.MessagesField = "messages"
	}
	// Only with a limit: an unset key leaves the run's fingerprint as it was.
	if c.MaxTokens > 0 && c.Truncation == "" {
		c.Truncation = TruncError
	}
}

// Validate parses the templates and reports every problem at once, each
// naming its key relative to the section (user, system).
func (c *Config) Validate() error {
	var p pipeline.Problems
	_, err := New(*c)
	p.Section("", err)
	if c.MaxTokens < 0 {
		p.Add("max_tokens", "must be >= 0 (0: no limit), got %d", c.MaxTokens)
	}
	if c.Truncation != "" {
		p.OneOf("truncation", c.Truncation, TruncLeft, TruncRight, TruncMiddle, TruncError)
		if c.MaxTokens == 0 {
			p.Add("truncation", "needs prompt.max_tokens")
		}
	}
	return p.Err()
}
