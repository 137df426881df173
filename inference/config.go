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
	// Endpoints are the base URLs of OpenAI-compatible servers
	// ("http://gpu-0:8000/v1"), or "sim://" for the built-in simulator.
	// Left out, they default to the simulator; an explicit empty list is an
	// error.
	Endpoints []string `yaml:"endpoints"`
	// Model is the model name sent to the server and written to the model
	// column.
	Model string `yaml:"model"`
	// API is chat (/v1/chat/completions), completions (/v1/completions
	// with a text prompt) or tokens (trajflow holds each trajectory's token
	// ids: POST /tokenize for the prompt and every observation, token-id
	// prompts on /v1/completions; exact multi-turn training data, see
	// docs/inference.md), batch (chat requests through the Batch API:
	// /v1/files and /v1/batches, at the provider's batch price; single-turn
	// only; see docs/hosted-apis.md), or sglang (as tokens, with the
	// token-id prompts sent to SGLang's native POST /generate; see
	// docs/engines.md).
	API API `yaml:"api"`
	// APIKeyEnv names the environment variable holding the API key; its
	// value is redacted from everything trajflow writes.
	APIKeyEnv string `yaml:"api_key_env"`
	// Concurrency bounds the generations in flight over all endpoints (the
	// LLM slots; at most MaxConcurrency, 65536). With api: batch it bounds the requests waiting in batches
	// at once (default 1000 there): raise it for bigger batches.
	Concurrency int `yaml:"concurrency"`
	// EndpointConcurrency bounds the requests in flight per endpoint (0: no
	// bound beyond Concurrency).
	EndpointConcurrency int `yaml:"endpoint_concurrency"`
	// Params are request body parameters (temperature, top_p, max_tokens,
	// stop, logprobs, return_token_ids, ...) merged over each row's own,
	// key by key at the top level, as NeMo Gym does. The rollout's seed is
	// sent as seed when repeat.seed is set (a row's own seed, unless
	// repeat.override_row_seed). A key named like a secret (api_key) is
	// redacted in files and logs.
	Params map[string]any `yaml:"params"`
	// Timeout bounds one HTTP request attempt.
	Timeout pipeline.Duration `yaml:"timeout"`
	// MaxAttempts bounds the tries per request (1: no retry). 429, 5xx,
	// connection errors and timeouts are retried.
	MaxAttempts int `yaml:"max_attempts"`
	// Deadline bounds one request over all its retries (0: none).
	Deadline pipeline.Duration `yaml:"deadline"`
	// SilenceAfter is the least time an endpoint may hold requests
	// without answering any while the other endpoints answer (or answered
	// since and are done: the run's tail), before it
	// is taken out as silent (logged by name) and its requests move to the
	// others: an engine that accepts connections and never answers no
	// longer holds the run's tail until generate.timeout. The time is
	// twice the fleet's longest recent answer time when that is longer (an
	// endpoint busy with long answers is not silent); an endpoint is never
	// judged while no endpoint answers (engines still loading). The
	// default protects answers longer than any seen yet early in a run;
	// short runs over fast endpoints may set it lower (e.g. 1s).
	//
	// Default: 30s.
	SilenceAfter pipeline.Duration `yaml:"silence_after"`
	// BackoffBase is the jittered exponential backoff's first delay.
	BackoffBase pipeline.Duration `yaml:"backoff_base"`
	// BackoffMax bounds one backoff delay.
	BackoffMax pipeline.Duration `yaml:"backoff_max"`
	// Priority is whether requests carry a scheduling priority from their
	// group's state (docs/inference.md, "Request priority"): auto (the
	// default) sends it as the body's priority, the field vLLM
	// (--scheduling-policy priority) and SGLang read, to every endpoint
	// but through the Batch API, and stops sending it once a server
	// refuses it (vLLM without the priority policy, a hosted API); off
	// never sends it.
	Priority string `yaml:"priority"`
	// RoutedExperts records, for a mixture-of-experts model, the experts
	// the engine routed every token to (router replay, "R3"): the output's
	// routed_experts column (SCHEMA.md). It needs api: tokens or sglang,
	// and an engine started to return them: vLLM (0.22 or later) with
	// --enable-return-routed-experts (its completions answer then carries
	// choices[].routed_experts), SGLang with --enable-return-routed-experts
	// (trajflow sends return_routed_experts: true on each /generate
	// request; the answer's meta_info.routed_experts). An engine that
	// sends none leaves the column null. See docs/engines.md.
	RoutedExperts bool `yaml:"routed_experts"`
	// RoutedExpertsLayers is the model's number of MoE layers: SGLang
	// sends a flat buffer of layers × top-k ids per position, and with it
	// trajflow tells the two apart (0: the routes are recorded as 1 layer
	// of layers × top-k ids). vLLM's answer carries its shape: a value
	// given is checked against it.
	RoutedExpertsLayers int `yaml:"routed_experts_layers"`
}

// Priority modes (Config.Priority).
const (
	PriorityAuto = "auto"
	PriorityOff  = "off"
)

// PriorityOn reports whether requests may carry a priority: not off, and
// not through the Batch API.
func (c *Config) PriorityOn() bool {
	return c.Priority != PriorityOff && !c.API.Batch()
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
		c.API = APIChat
	}
	if c.Concurrency == 0 {
		c.Concurrency = 64
		if c.API.Batch() {
			// The requests waiting in batches at once.
			c.Concurrency = 1000
		}
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
	if c.Priority == "" {
		c.Priority = PriorityAuto
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
	p.OneOf("api", string(c.API), apiNames()...)
	if c.Priority != "" {
		p.OneOf("priority", c.Priority, PriorityAuto, PriorityOff)
	}
	if c.Concurrency < 1 || c.Concurrency > MaxConcurrency {
		p.Add("concurrency", "must be between 1 and %d, got %d", MaxConcurrency, c.Concurrency)
	}
	if c.EndpointConcurrency < 0 || c.EndpointConcurrency > MaxConcurrency {
		p.Add("endpoint_concurrency", "must be between 0 and %d, got %d", MaxConcurrency, c.EndpointConcurrency)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > MaxAttempts {
		p.Add("max_attempts", "must be between 1 and %d, got %d", MaxAttempts, c.MaxAttempts)
	}
	if c.RoutedExperts && !c.API.Caps().RoutedExperts {
		p.Add("routed_experts", "needs api: tokens or sglang (the answers that carry routes), got api: %s", c.API)
	}
	if c.RoutedExpertsLayers < 0 {
		p.Add("routed_experts_layers", "must be >= 0, got %d", c.RoutedExpertsLayers)
	} else if c.RoutedExpertsLayers > 0 && !c.RoutedExperts {
		p.Add("routed_experts_layers", "is read only with routed_experts: true")
	}
	if c.APIKeyEnv != "" && os.Getenv(c.APIKeyEnv) == "" {
		p.Add("api_key_env", "environment variable %s is not set", c.APIKeyEnv)
	}
	return p.Err()
}
