package envstep

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// Config is the env section: which environment steps the trajectories, its
// own options, and the scheduling keys that bound a trajectory. With Routes
// the run has several environments, one chosen per row by RouteField.
type Config struct {
	// Name is the environment's registered name: math, guess, grid, tools,
	// sim, subprocess, http (docs/environments.md, docs/external-envs.md).
	// Not with Routes.
	Name string `yaml:"name"`
	// MaxTurns bounds the model turns of one trajectory (0: no bound, as
	// NeMo RL's default of 999999 turns: the environment ends it, or
	// max_seq_len or the timeout; NeMo RL's max_rollout_turns: 0 runs no
	// turn).
	MaxTurns int `yaml:"max_turns"`
	// MaxSeqLen bounds a trajectory's tokens, exactly (0: no bound): every
	// request's max_tokens is capped to the room left, an observation's
	// token ids that would overflow are cut (its text kept) and the
	// trajectory ends truncated; no row is longer. The generate stage
	// enforces it. In generate.api: chat against a server that reports
	// no token ids (Ollama), the last response's usage measures the
	// sequence: a turn can pass the bound by the new observations'
	// length, and its row is then marked truncated and ends
	// (docs/inference.md).
	MaxSeqLen int `yaml:"max_seq_len"`
	// ObservationTokens is how an observation (the messages after a
	// reply) becomes token ids in generate.api: tokens: "template" (the
	// default) renders it with the server's chat template, as the next
	// chat request would (role headers, the closing of a reply the model
	// did not finish, the generation prompt after it); "raw" tokenises
	// each observation's text alone, without the template or special
	// tokens, as NeMo RL's multi-turn rollout does (its environments put
	// any chat formatting in the text). The choice changes the sequence,
	// where max_seq_len cuts, and env_tokens, which counts the
	// observations' ids either way. Only in the env section, not in a
	// route; raw needs generate.api: tokens or sglang.
	ObservationTokens string `yaml:"observation_tokens"`
	// Concurrency bounds the environment steps in flight (the env slots).
	Concurrency int `yaml:"concurrency"`
	// TurnTimeout bounds one environment call (0: none).
	TurnTimeout pipeline.Duration `yaml:"turn_timeout"`
	// Timeout bounds one trajectory from its start (0: none).
	Timeout pipeline.Duration `yaml:"timeout"`
	// RouteField is the dotted path into a row whose value names its route
	// (e.g. agent_ref.name). Only with Routes; a row whose value has no
	// route is a bad row (source.on_bad_row) naming the value and the
	// routes known.
	//
	// Default: `task_name`, then `agent_ref.name` (NeMo RL's and NeMo Gym's fields).
	RouteField string `yaml:"route_field"`
	// DefaultRoute is the route of a row that has no value at the route
	// field (NeMo Gym's +agent_name for rows without agent_ref); empty: such
	// a row is a bad row. Only with Routes; it must be one of their keys.
	DefaultRoute string `yaml:"default_route"`
	// Routes are several environments in one run, chosen per row by
	// RouteField: {ROUTE: {name: ENV, ...its options and scheduling
	// keys...}}, each an env section of its own. A route's name defaults
	// to its key; its scheduling keys left unset take this section's. The
	// env column holds the route's name (docs/environments.md).
	Routes map[string]*Config `yaml:"routes"`
	// InvalidActionPenalty is charged to each step whose action the
	// environment marked invalid (is_action_valid: false), as
	// verl-agent's invalid_action_penalty_coef: it is taken off the step
	// row's step_return (after the returns are computed) and its episode
	// score (episode_advantage), not off step_reward, the trajectory's
	// reward or the keep rule's rewards; 0: none. It shapes step rows
	// only (output.steps).
	InvalidActionPenalty float64 `yaml:"invalid_action_penalty"`
	// HistoryLength, when set, turns on step-wise prompting: each turn's
	// request holds the task, the last HistoryLength (observation,
	// action) steps and the current observation (0: the observation only),
	// rendered by StepTemplate and HistoryTemplate, instead of the whole
	// chat (verl-agent's history_length; docs/prompts.md, Step-wise
	// prompts).
	//
	// Default: none (the whole chat).
	HistoryLength *int `yaml:"history_length"`
	// StepTemplate renders the step-wise request's user message (only with
	// HistoryLength; see stages/template.StepPrompt and docs/prompts.md).
	//
	// Default: the built-in step template.
	StepTemplate string `yaml:"step_template"`
	// HistoryTemplate renders one earlier step inside the step-wise
	// request (only with HistoryLength).
	//
	// Default: the built-in history template.
	HistoryTemplate string `yaml:"history_template"`
	// Options are the environment's own keys (e.g. answer_field for math),
	// which its factory checks: see Environment options below. Those it
	// declares operational (pool sizes, timeouts, retries) may change on
	// resume; those it declares secret are redacted.
	Options map[string]any `yaml:",inline"`
}

// The values of env.observation_tokens.
const (
	ObservationTemplate = "template"
	ObservationRaw      = "raw"
)

// DefaultRouteFields are the fields a row's route is read from when
// route_field is not set, in order.
var DefaultRouteFields = []string{"task_name", "agent_ref.name"}

// SetDefaults fills the keys left unset.
func (c *Config) SetDefaults() {
	if c.Concurrency == 0 {
		c.Concurrency = 64
	}
	if len(c.Routes) == 0 {
		if c.Name == "" {
			c.Name = "math"
		}
		return
	}
	for key, r := range c.Routes {
		if r == nil {
			r = &Config{}
			c.Routes[key] = r
		}
		if r.Name == "" {
			r.Name = key
		}
		if r.MaxTurns == 0 {
			r.MaxTurns = c.MaxTurns
		}
		if r.MaxSeqLen == 0 {
			r.MaxSeqLen = c.MaxSeqLen
		}
		if r.Concurrency == 0 {
			r.Concurrency = c.Concurrency
		}
		if r.TurnTimeout == 0 {
			r.TurnTimeout = c.TurnTimeout
		}
		if r.Timeout == 0 {
			r.Timeout = c.Timeout
		}
		if r.InvalidActionPenalty == 0 {
			r.InvalidActionPenalty = c.InvalidActionPenalty
		}
		if r.HistoryLength == nil {
			r.HistoryLength = c.HistoryLength
		}
		if r.StepTemplate == "" {
			r.StepTemplate = c.StepTemplate
		}
		if r.HistoryTemplate == "" {
			r.HistoryTemplate = c.HistoryTemplate
		}
	}
}

// Validate reports every problem of the scheduling keys at once. The
// environment's name and options are checked by whoever resolves the name
// to an environment.
func (c *Config) Validate() error {
	var p pipeline.Problems
	c.validateLimits(&p)
	switch c.ObservationTokens {
	case "", ObservationTemplate, ObservationRaw:
	default:
		p.Add("observation_tokens", "must be %s or %s, got %q", ObservationTemplate, ObservationRaw, c.ObservationTokens)
	}
	if len(c.Routes) == 0 {
		if c.RouteField != "" {
			p.Add("route_field", "needs routes")
		}
		if c.DefaultRoute != "" {
			p.Add("default_route", "needs routes")
		}
		return p.Err()
	}
	if c.Name != "" {
		p.Add("name", "give either name (one environment) or routes (one per row), not both")
	}
	if len(c.Options) > 0 {
		keys := make([]string, 0, len(c.Options))
		for k := range c.Options {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		p.Add(keys[0], "an environment option beside routes: put it under its route (routes.KEY.%s)", keys[0])
	}
	if c.RouteField != "" && strings.Trim(c.RouteField, ".") != c.RouteField {
		p.Add("route_field", "must be a dotted path such as agent_ref.name, got %q", c.RouteField)
	}
	if _, ok := c.Routes[c.DefaultRoute]; c.DefaultRoute != "" && !ok {
		p.Add("default_route", "%q is not a route (routes: %s)", c.DefaultRoute, strings.Join(c.RouteKeys(), ", "))
	}
	for _, key := range c.RouteKeys() {
		r := c.Routes[key]
		var rp pipeline.Problems
		if key == "" {
			rp.Add("", "a route needs a non-empty key")
		}
		if len(r.Routes) > 0 {
			rp.Add("routes", "routes do not nest")
		}
		if r.RouteField != "" {
			rp.Add("route_field", "belongs to the env section, not to a route")
		}
		if r.ObservationTokens != "" {
			rp.Add("observation_tokens", "belongs to the env section, not to a route")
		}
		if r.DefaultRoute != "" {
			rp.Add("default_route", "belongs to the env section, not to a route")
		}
		r.validateLimits(&rp)
		p.Section("routes."+key, rp.Err())
	}
	return p.Err()
}

// Upper bounds of the section's limits.
const (
	MaxTurns       = 1 << 16
	MaxSeqLen      = 1 << 24
	MaxConcurrency = 1 << 16
)

func (c *Config) validateLimits(p *pipeline.Problems) {
	if c.MaxTurns < 0 || c.MaxTurns > MaxTurns {
		p.Add("max_turns", "must be between 0 (no limit) and %d, got %d", MaxTurns, c.MaxTurns)
	}
	if c.MaxSeqLen < 0 || c.MaxSeqLen > MaxSeqLen {
		p.Add("max_seq_len", "must be between 0 (none) and %d, got %d", MaxSeqLen, c.MaxSeqLen)
	}
	if c.Concurrency < 1 || c.Concurrency > MaxConcurrency {
		p.Add("concurrency", "must be between 1 and %d, got %d", MaxConcurrency, c.Concurrency)
	}
	if c.HistoryLength != nil && *c.HistoryLength < 0 {
		p.Add("history_length", "must be >= 0 (0: the current observation only), got %d", *c.HistoryLength)
	}
	if c.HistoryLength == nil {
		if c.StepTemplate != "" {
			p.Add("step_template", "needs history_length (step-wise prompting)")
		}
		if c.HistoryTemplate != "" {
			p.Add("history_template", "needs history_length (step-wise prompting)")
		}
	}
	if math.IsNaN(c.InvalidActionPenalty) || math.IsInf(c.InvalidActionPenalty, 0) || c.InvalidActionPenalty < 0 {
		p.Add("invalid_action_penalty", "must be a finite number >= 0, got %v", c.InvalidActionPenalty)
	}
}

// Limits returns the per-trajectory limits the stage enforces.
func (c *Config) Limits() Limits {
	return Limits{MaxTurns: c.MaxTurns, TurnTimeout: c.TurnTimeout.D(), Timeout: c.Timeout.D(),
		InvalidActionPenalty: c.InvalidActionPenalty}
}

// Routed reports whether the section has routes.
func (c *Config) Routed() bool { return len(c.Routes) > 0 }

// RouteKeys lists the route names, sorted.
func (c *Config) RouteKeys() []string {
	keys := make([]string, 0, len(c.Routes))
	for k := range c.Routes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// RouteSpec is one environment of a run: its route name (the env column's
// value), its config section (for errors: "env" or "env.routes.KEY") and
// its config.
type RouteSpec struct {
	Route   string
	Section string
	Config  *Config
}

// RouteSpecs lists the run's environments: the routes, sorted by name, or
// the section itself (its route is its name).
func (c *Config) RouteSpecs() []RouteSpec {
	if !c.Routed() {
		return []RouteSpec{{Route: c.Name, Section: "env", Config: c}}
	}
	out := make([]RouteSpec, 0, len(c.Routes))
	for _, k := range c.RouteKeys() {
		out = append(out, RouteSpec{Route: k, Section: "env.routes." + k, Config: c.Routes[k]})
	}
	return out
}

// TotalConcurrency is the environment calls in flight at most, over every
// route.
func (c *Config) TotalConcurrency() int {
	if !c.Routed() {
		return c.Concurrency
	}
	n := 0
	for _, r := range c.Routes {
		n += r.Concurrency
	}
	return n
}

// MaxTimeout is the longest trajectory timeout of the routes, 0 when one
// of them has none.
func (c *Config) MaxTimeout() pipeline.Duration {
	var d pipeline.Duration
	for _, s := range c.RouteSpecs() {
		if s.Config.Timeout == 0 {
			return 0
		}
		d = max(d, s.Config.Timeout)
	}
	return d
}

// RouteOf returns the route of a row (its decoded top-level fields): the
// section's name without routes; else the value at route_field (or the
// first of task_name, agent_ref.name present), which must name a route,
// or default_route when the row has none.
// The error names the field, the value and the routes known.
func (c *Config) RouteOf(fields map[string]any) (string, error) {
	if !c.Routed() {
		return c.Name, nil
	}
	paths := DefaultRouteFields
	if c.RouteField != "" {
		paths = []string{c.RouteField}
	}
	known := strings.Join(c.RouteKeys(), ", ")
	for _, path := range paths {
		v, ok := lookupPath(fields, path)
		if !ok || v == nil {
			continue
		}
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case float64, int, int64, bool:
			s = fmt.Sprint(v)
		default:
			return "", fmt.Errorf("env route: field %s is a %T, not a route name (routes: %s)", path, v, known)
		}
		if _, ok := c.Routes[s]; !ok {
			return "", fmt.Errorf("env route: %s %q has no route (routes: %s)", path, s, known)
		}
		return s, nil
	}
	if c.DefaultRoute != "" {
		return c.DefaultRoute, nil
	}
	return "", fmt.Errorf("env route: the row has no %s to choose its environment by (routes: %s; env.default_route names one for such rows)", strings.Join(paths, " or "), known)
}

// lookupPath follows a dotted path through nested objects.
func lookupPath(fields map[string]any, path string) (any, bool) {
	var cur any = fields
	for part := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}
