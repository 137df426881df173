package template

import (
	"github.com/trajflow/trajflow/pipeline"
)

// Config is the prompt section: templates that render messages from row
// fields. Leave it empty when rows carry their own messages.
type Config struct {
	// System is the system message's template (see User for the
	// placeholders).
	System string `yaml:"system"`
	// User is the user message's template: {field} placeholders over the
	// row's fields, {a.b} into nested objects, {field:json} to insert a
	// value (an object or a list included) as JSON, {{ and }} for literal
	// braces; a plain placeholder on an object or a list is an error.
	User string `yaml:"user"`
	// MessagesField names the row field holding OpenAI messages when no
	// template is set (NeMo Gym rows' responses_create_params.input is
	// always read).
	MessagesField string `yaml:"messages_field"`
	// OverrideRowInput lets the templates replace the messages a row
	// carries (NeMo Gym's responses_create_params.input, or its messages
	// field). Without it a template meeting such a row is an error naming
	// both, as NeMo Gym refuses the combination.
	OverrideRowInput bool `yaml:"override_row_input"`
	// MaxTokens limits the rendered first prompt (step-wise: every step's
	// prompt), as the server's POST /tokenize counts it (chat template and
	// tools included), to this many token ids; 0: no limit. verl's
	// data.max_prompt_length. Each row records prompt_tokens_dropped.
	MaxTokens int `yaml:"max_tokens"`
	// Truncation says what a longer prompt becomes (verl's data.truncation):
	// left keeps its last MaxTokens ids, right its first, middle its first
	// MaxTokens/2 and last MaxTokens-MaxTokens/2; error fails the row (an
	// error row prompt_too_long naming the input row). left, right and
	// middle send ids, so they need generate.api: tokens or sglang. See
	// docs/prompts.md, Prompt length limit.
	//
	// Default: `error` when max_tokens is set.
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
