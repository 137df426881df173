package inference

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// Config is the generate section: which model, on which servers, with
// which request parameters, and how hard to try. Backends read the keys
// they need; the generate stage reads Model and Params.
type Config struct {
	// Endpoints are base URLs ("http://host:8000/v1") or "sim://". Left
	// out (nil), they default to the built-in simulator; an explicit empty
	// list is an error.
	Endpoints []string `yaml:"endpoints"`
	Model     string   `yaml:"model"`
	// API is chat (/v1/chat/completions), completions (/v1/completions
	// with a text prompt) or tokens (trajflow holds each trajectory's token
	// sequence: POST /tokenize for the first prompt and each observation,
	// /v1/completions with token-id prompts; see docs/inference.md).
	API string `yaml:"api"`
	// APIKeyEnv names the environment variable holding the API key.
	APIKeyEnv string `yaml:"api_key_env"`
	// Concurrency bounds requests in flight over all endpoints (at most
	// MaxConcurrency, 65536).
	Concurrency int `yaml:"concurrency"`
	// EndpointConcurrency bounds requests in flight per endpoint (0: no
	// bound beyond Concurrency).
	EndpointConcurrency int `yaml:"endpoint_concurrency"`
	// Params are request body parameters merged over each row's own
	// (temperature, top_p, max_tokens, stop, seed, logprobs, ...).
	Params map[string]any `yaml:"params"`
	// Timeout bounds one HTTP request attempt.
	Timeout pipeline.Duration `yaml:"timeout"`
	// MaxAttempts bounds tries per request (1: no retry).
	MaxAttempts int `yaml:"max_attempts"`
	// Deadline bounds one request over all its retries.
	Deadline pipeline.Duration `yaml:"deadline"`
	// BackoffBase and BackoffMax shape the jittered exponential backoff.
	BackoffBase pipeline.Duration `yaml:"backoff_base"`
	BackoffMax  pipeline.Duration `yaml:"backoff_max"`
}

// SimScheme is the endpoint of the built-in simulator.
const SimScheme = "sim://"

// SetDefaults fills the keys left unset.
func (c *Config) SetDefaults() {
	if c.Endpoints == nil {
		c.Endpoints = []string{SimScheme}
	}
	if c.Model == "" {
		c.Model = "sim"
	}
	if c.API == "" {
		c.API = "chat"
	}
	if c.Concurrency == 0 {
		c.Concurrency = 64
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 5
	}
	if c.Timeout == 0 {
		c.Timeout = pipeline.Duration(10 * time.Minute)
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = pipeline.Duration(250 * time.Millisecond)
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = pipeline.Duration(30 * time.Second)
	}
}

// Simulated reports whether the endpoints name the built-in simulator.
func (c *Config) Simulated() bool {
	return len(c.Endpoints) > 0 && strings.HasPrefix(c.Endpoints[0], SimScheme)
}

// Upper bounds of the section's counts: each in-flight request holds its
// response in memory (up to the response limit), and each attempt waits.
const (
	MaxConcurrency = 1 << 16
	MaxAttempts    = 100
)

// Validate reports every problem of the section at once.
func (c *Config) Validate() error {
	var p pipeline.Problems
	if c.Endpoints != nil && len(c.Endpoints) == 0 {
		p.Add("endpoints", "empty list: give at least one base URL (http://host:8000/v1), or leave the key out for the built-in simulator (sim://)")
	}
	for i, e := range c.Endpoints {
		if !strings.HasPrefix(e, SimScheme) && !strings.HasPrefix(e, "http://") && !strings.HasPrefix(e, "https://") {
			p.Add(fmt.Sprintf("endpoints[%d]", i), "%q: want http://host:port/v1, https://… or sim://", e)
		}
	}
	p.OneOf("api", c.API, "chat", "completions", "tokens")
	if c.Concurrency < 1 || c.Concurrency > MaxConcurrency {
		p.Add("concurrency", "must be between 1 and %d, got %d", MaxConcurrency, c.Concurrency)
	}
	if c.EndpointConcurrency < 0 || c.EndpointConcurrency > MaxConcurrency {
		p.Add("endpoint_concurrency", "must be between 0 and %d, got %d", MaxConcurrency, c.EndpointConcurrency)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > MaxAttempts {
		p.Add("max_attempts", "must be between 1 and %d, got %d", MaxAttempts, c.MaxAttempts)
	}
	if c.APIKeyEnv != "" && os.Getenv(c.APIKeyEnv) == "" {
		p.Add("api_key_env", "environment variable %s is not set", c.APIKeyEnv)
	}
	return p.Err()
}
