package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/trajflow/trajflow/inference/structured"
	"github.com/trajflow/trajflow/sources"
	"path/filepath"
	"reflect"
	"slices"
	"sort"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/stages/envstep"
	"github.com/trajflow/trajflow/stages/groups"
	"github.com/trajflow/trajflow/storage"
)

// Semantic returns the keys of the config that decide what a run produces,
// flattened to "section.key" paths with JSON values. A secret value (see
// Redactor) is replaced by a keyed hash (UseSecretKey), never written. Keys that only decide
// how fast or where (endpoints, concurrency, timeouts, output layout, the
// API key's variable, and the options the environment declares
// operational: envs.Spec.Operational) are left out, so a resumed run may
// change them. source.path is the input's absolute path; what the input
// holds is checked beside the fingerprint (sources.Identity).
func (c *Config) Semantic() map[string]string {
	sem := map[string]any{
		"source.path":         absPath(c.Source.Path),
		"source.format":       c.Source.Format,
		"source.limit":        c.Source.Limit,
		"source.offset":       c.Source.Offset,
		"source.shard":        c.Source.Shard,
		"prompt":              c.Prompt,
		"repeat":              c.Repeat,
		"generate.model":      c.Generate.Model,
		"generate.api":        c.Generate.API,
		"generate.params":     c.Generate.Params,
		"generate.sim":        c.Generate.Sim,
		"env.name":            c.Env.Name,
		"env.max_turns":       c.Env.MaxTurns,
		"env.max_seq_len":     c.Env.MaxSeqLen,
		"env.options":         semanticOptions(c.Env.Name, c.Env.Options),
		"groups.keep":         c.Groups.Keep,
		"groups.metric":       c.Groups.Metric,
		"groups.mean_in":      c.Groups.MeanIn,
		"groups.baseline":     c.Groups.Baseline,
		"groups.target":       c.Groups.Target,
		"groups.max_attempts": c.Groups.MaxAttempts,
		"groups.resample":     c.Groups.Resample,
	}
	// With no seed configured none is sent (a row's own excepted); the
	// key is present only then, so configs that set repeat.seed keep their
	// fingerprints.
	if !c.Repeat.SeedConfigured() {
		sem["repeat.seed"] = "none sent" // (a zero value would be dropped)
	}
	// observation_tokens: raw changes the token data; the default is left
	// out so that the fingerprints of outputs made before the key stay.
	if ot := c.Env.ObservationTokens; ot != "" && ot != envstep.ObservationTemplate {
		sem["env.observation_tokens"] = ot
	}
	// task_index: dedup renumbers the tasks; the default (line) is left
	// out so that the fingerprints of outputs made before the key stay.
	if ti := c.Source.TaskIndex; ti != "" && ti != sources.TaskIndexLine {
		sem["source.task_index"] = ti
	}
	// Keys added later are present only when set, so that the
	// fingerprints of outputs made before them stay.
	if c.Generate.RoutedExperts {
		// The routed_experts column's content.
		sem["generate.routed_experts"] = true
		sem["generate.routed_experts_layers"] = c.Generate.RoutedExpertsLayers
	}
	if c.Env.InvalidActionPenalty != 0 {
		sem["env.invalid_action_penalty"] = c.Env.InvalidActionPenalty
	}
	if h := c.Env.HistoryLength; h != nil {
		sem["env.history_length"] = fmt.Sprint(*h) // a string: 0 is a setting
		sem["env.step_template"] = c.Env.StepTemplate
		sem["env.history_template"] = c.Env.HistoryTemplate
	}
	if g := c.Groups.Gamma; g != nil && *g != groups.DefaultGamma {
		sem["groups.gamma"] = fmt.Sprint(*g) // a string: 0 is a setting
	}
	if a := c.Groups.StepAdvantage; a != "" && a != groups.StepMeanNorm {
		sem["groups.step_advantage"] = a
	}
	if w := c.Groups.StepAdvantageW; w != nil && *w != groups.DefaultStepAdvantageW {
		sem["groups.step_advantage_w"] = fmt.Sprint(*w)
	}
	if c.Output.Steps {
		// Every data part file has its steps part: a resume must not
		// turn them on or off.
		sem["output.steps"] = true
	}
	if c.Output.OpenAIBatch {
		// Every part has its OpenAI Batch files: a resume must not turn
		// them on or off, or the earlier parts' requests would have no
		// line.
		sem["output.openai_batch"] = true
	}
	// The structured-output check decides which replies become ok rows.
	if n := c.Generate.Structured.Retries(); n != structured.DefaultInvalidRetries {
		sem["generate.invalid_retries"] = fmt.Sprint(n) // a string: 0 is a setting
	}
	if len(c.Generate.Structured.RetryOn) > 0 {
		sem["generate.retry_on"] = c.Generate.Structured.RetryOn
	}
	if c.Env.Routed() {
		// Each route's environment, its semantic options and limits; the
		// keys of a run without routes stay as they were.
		sem["env.route_field"] = c.Env.RouteField
		if c.Env.DefaultRoute != "" {
			sem["env.default_route"] = c.Env.DefaultRoute
		}
		routes := map[string]any{}
		for key, r := range c.Env.Routes {
			rt := map[string]any{
				"name": r.Name, "max_turns": r.MaxTurns, "max_seq_len": r.MaxSeqLen,
				"options": semanticOptions(r.Name, r.Options),
			}
			if r.InvalidActionPenalty != 0 {
				rt["invalid_action_penalty"] = r.InvalidActionPenalty
			}
			if h := r.HistoryLength; h != nil {
				rt["history_length"] = fmt.Sprint(*h)
				rt["step_template"] = r.StepTemplate
				rt["history_template"] = r.HistoryTemplate
			}
			routes[key] = rt
		}
		sem["env.routes"] = routes
	}
	out := make(map[string]string, len(sem))
	for k, v := range sem {
		flatten(out, k, v)
	}
	c.redactSemantic(out)
	return out
}

// absPath is p made absolute and clean (p itself if that fails).
func absPath(p string) string {
	if p == "" {
		return ""
	}
	if storage.IsURL(p) {
		if u, err := storage.ParseURL(p); err == nil {
			return u.String()
		}
		return p
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// semanticOptions are the environment's options without those it
// declares operational.
func semanticOptions(name string, opts map[string]any) map[string]any {
	spec, ok := envs.Lookup(name)
	if !ok || len(spec.Operational) == 0 {
		return opts
	}
	out := make(map[string]any, len(opts))
	for k, v := range opts {
		if !slices.Contains(spec.Operational, k) {
			out[k] = v
		}
	}
	return out
}

// flatten writes v under key, descending into structs and maps so that a
// difference names the innermost key.
func flatten(out map[string]string, key string, v any) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Struct:
		t := rv.Type()
		for i := 0; i < t.NumField(); i++ {
			name := t.Field(i).Tag.Get("yaml")
			if name == "" || name == "-" {
				continue
			}
			flatten(out, key+"."+name, rv.Field(i).Interface())
		}
		return
	case reflect.Map:
		if rv.Len() == 0 {
			return
		}
		for _, k := range rv.MapKeys() {
			flatten(out, fmt.Sprintf("%s.%v", key, k.Interface()), rv.MapIndex(k).Interface())
		}
		return
	}
	if rv.IsValid() && rv.IsZero() {
		return // an unset key and its zero value are the same setting
	}
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(fmt.Sprint(v))
	}
	out[key] = string(b)
}

// Fingerprint is a hash of the semantic keys and the canonical JSON it was
// computed from (stored with the output, to name differing keys later).
func (c *Config) Fingerprint() (hash, canonical string) {
	b, _ := json.Marshal(c.Semantic()) // map keys are sorted
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), string(b)
}

// DiffSemantic lists the semantic keys whose values differ between a stored
// canonical JSON (from Fingerprint) and this config, as "key: old → new".
func (c *Config) DiffSemantic(stored string) ([]string, error) {
	var old map[string]string
	if err := json.Unmarshal([]byte(stored), &old); err != nil {
		return nil, fmt.Errorf("stored config is unreadable: %w", err)
	}
	cur := c.Semantic()
	keys := map[string]bool{}
	for k := range old {
		keys[k] = true
	}
	for k := range cur {
		keys[k] = true
	}
	var diffs []string
	for k := range keys {
		if old[k] != cur[k] {
			diffs = append(diffs, fmt.Sprintf("%s: %s → %s", k, orUnset(old[k]), orUnset(cur[k])))
		}
	}
	sort.Strings(diffs)
	return diffs, nil
}

func orUnset(v string) string {
	if v == "" {
		return "(unset)"
	}
	return v
}
