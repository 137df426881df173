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
	// Name is the environment's registered name (not with Routes).
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
	// RouteField is the dotted path into a row whose value names its route
	// (e.g. agent_ref.name); empty: task_name, then agent_ref.name (NeMo
	// RL's and NeMo Gym's fields). Only with Routes.
	RouteField string `yaml:"route_field"`
	// Routes are the run's environments by route name: each is an env
	// section of its own (name, options, scheduling keys). A route's
	// name defaults to its key; its scheduling keys left unset take this
	// section's.
	Routes map[string]*Config `yaml:"routes"`
	// InvalidActionPenalty is subtracted from the reward of each step
	// whose action the environment marked invalid (is_action_valid:
	// false); 0: none.
	InvalidActionPenalty float64 `yaml:"invalid_action_penalty"`
	// HistoryLength, when set, turns on step-wise prompting: each turn's
	// request holds the task, the last HistoryLength (observation,
	// action) steps and the current observation, rendered by
	// StepTemplate and HistoryTemplate, instead of the whole chat
	// (verl-agent's history_length). nil: the whole chat (the default).
	HistoryLength *int `yaml:"history_length"`
	// StepTemplate and HistoryTemplate render step-wise requests (see
	// stages/template.StepPrompt); empty: the defaults. Only with
	// HistoryLength.
	StepTemplate    string `yaml:"step_template"`
	HistoryTemplate string `yaml:"history_template"`
	// Options are the environment's own keys (e.g. answer_field); the
	// environment's factory checks them.
	Options map[string]any `yaml:",inline"`
}

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
	if len(c.Routes) == 0 {
		if c.RouteField != "" {
			p.Add("route_field", "needs routes")
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
	return Limits{MaxTurns: c.MaxTurns, TurnTimeout: c.TurnTimeout.D(), Timeout: c.Timeout.D(), MaxSeqLen: c.MaxSeqLen,
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
// first of task_name, agent_ref.name present), which must name a route.
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
	return "", fmt.Errorf("env route: the row has no %s to choose its environment by (routes: %s)", strings.Join(paths, " or "), known)
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
