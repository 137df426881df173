package sim

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Options configure a simulated server. The zero value of a field means its
// documented default, except where noted.
type Options struct {
	// Seed drives every draw.
	Seed int64
	// Preset is the response-length and workload preset: short (default),
	// reasoning or agent.
	Preset string
	// Length overrides the preset's response-length model when its Median
	// is > 0.
	Length LengthModel
	// Accuracy is the mean probability that an answer is right (each task
	// draws its own probability around it). Default 0.6; use a negative
	// value for 0 (always wrong).
	Accuracy float64
	// Keep is the benchmark workload's probability that a group gets 1..n−1
	// correct samples (otherwise all right or all wrong); -1 turns it off.
	// It applies only when a request's group is known (GroupSize, or the
	// sim_group_size extra); otherwise correctness is drawn per sample.
	Keep float64
	// GroupSize and BaseSeed let the simulator derive a request's group and
	// rollout index from its seed when the caller uses seed = BaseSeed +
	// attempt·GroupSize + rollout_index (repeat.seed_mode offset). Request
	// extras sim_group_size / sim_rollout_index / sim_attempt take
	// precedence.
	GroupSize int
	BaseSeed  int64
	// TimeScale multiplies A, C, P and environment delays; 0 answers at once
	// with no timing at all.
	TimeScale float64
	// Capacity is B, the most requests in the running set. Default 256.
	Capacity int
	// A, C, P: a step lasts A + C·|R| + P·(prompt tokens admitted in it).
	// Defaults 4.5ms, 45µs, 30µs (per prompt token), before TimeScale.
	A, C, P time.Duration
	// MinTurns, MaxTurns bound the turns a trajectory has (drawn uniformly
	// per prompt and sample). Defaults: 1..1 (short, reasoning), 2..8 (agent).
	MinTurns, MaxTurns int
	// EnvDelay is the median environment step delay (before TimeScale),
	// drawn log-normally (σ 0.5) per turn. Defaults: 0 (short, reasoning),
	// 500ms (agent).
	EnvDelay time.Duration
	// ObsTokens is the median observation length, drawn log-normally
	// (σ 0.5) per turn. Defaults: 0 (short, reasoning), 150 (agent).
	ObsTokens int
	// ToolCallRate is the probability that a reply to a request carrying
	// tools is a tool call. Default 0.5; negative for never.
	ToolCallRate float64
	// MaxModelLen, when > 0, rejects requests whose prompt tokens plus
	// max_tokens exceed it with vLLM's context-length 400.
	MaxModelLen int
	// StripReasoning makes the chat template drop the reasoning
	// ("<think>…</think>") of assistant messages before the last user
	// message, as Qwen3's and most reasoning models' templates do, and
	// makes replies start with a reasoning block; a chat-mode client then
	// sees its earlier turns re-rendered (token continuity breaks).
	StripReasoning bool
	// MoE, when its Layers are set, makes the model a mixture of experts
	// whose answers carry the experts each position was routed to, as the
	// engines started for router replay send them: a completions answer
	// its choices[].routed_experts (vLLM with
	// --enable-return-routed-experts), a /generate answer to a request
	// with return_routed_experts its meta_info.routed_experts (SGLang).
	// The router is MoE.Route.
	MoE MoE
	// Model is the model name /v1/models reports. Default "sim".
	Model string
	// Faults inject errors.
	Faults Faults
	// RateLimit, when a limit is set, makes the HTTP server enforce an
	// account's rate limits as hosted APIs do: 429 with Retry-After past
	// them, and x-ratelimit-* headers on every response.
	RateLimit RateLimit
	// BatchDelay is how long a Batch API batch stays in_progress before
	// its lines are answered (0: at once).
	BatchDelay time.Duration
}

// LengthModel is the response-length distribution:
// log L = ln(Median) + Sigma·(√Rho·z_prompt + √(1−Rho)·z_sample), capped at
// Cap (and at the request's max_tokens).
type LengthModel struct {
	Median float64
	Sigma  float64
	Rho    float64
	Cap    int
}

// Presets are the built-in workloads.
var Presets = map[string]LengthModel{
	"short":     {Median: 60, Sigma: 0.3, Rho: 0.5, Cap: 256},
	"reasoning": {Median: 2000, Sigma: 1.0, Rho: 0.5, Cap: 16384},
	"agent":     {Median: 200, Sigma: 0.8, Rho: 0.5, Cap: 1024},
}

// Faults are the injected failures. Each request draws one number from
// (Seed, request counter) and at most one fault applies; the probabilities
// must sum to at most 1.
type Faults struct {
	// Errors maps an HTTP status to the probability of answering with it.
	Errors map[int]float64
	// RetryAfter is sent with 429 and 503 answers (default 1s).
	RetryAfter time.Duration
	// Reset is the probability of closing the connection without an answer.
	Reset float64
	// Stall is the probability of holding a request for StallFor (wall
	// time, default 2s) before answering it normally.
	Stall    float64
	StallFor time.Duration
	// Malformed is the probability of a 200 answer whose body is not JSON.
	Malformed float64
	// Truncate is the probability of a 200 answer cut in the middle of its
	// body (the connection closes early).
	Truncate float64
	// Seed drives the fault draws (default: the simulator's seed).
	Seed int64
}

// ParseFaults parses a fault spec: comma-separated KEY=VALUE where KEY is an
// HTTP status (4xx/5xx) with a probability, reset, stall, malformed or
// truncate with a probability, or stall_for / retry_after with a duration.
// Example: "429=0.1,500=0.05,reset=0.01,stall=0.01,stall_for=3s".
func ParseFaults(spec string, f *Faults) error {
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return fmt.Errorf("fault %q: want KEY=VALUE", item)
		}
		switch k {
		case "stall_for", "retry_after":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return fmt.Errorf("fault %s: %q is not a duration like 2s", k, v)
			}
			if k == "stall_for" {
				f.StallFor = d
			} else {
				f.RetryAfter = d
			}
			continue
		}
		p, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(p) || p < 0 || p > 1 {
			return fmt.Errorf("fault %s: %q is not a probability in [0, 1]", k, v)
		}
		switch k {
		case "reset":
			f.Reset = p
		case "stall":
			f.Stall = p
		case "malformed":
			f.Malformed = p
		case "truncate":
			f.Truncate = p
		default:
			code, err := strconv.Atoi(k)
			if err != nil || code < 400 || code > 599 {
				return fmt.Errorf("fault %q: want an HTTP status 400..599, reset, stall, malformed, truncate, stall_for or retry_after", k)
			}
			if f.Errors == nil {
				f.Errors = map[int]float64{}
			}
			f.Errors[code] = p
		}
	}
	return f.validate()
}

func (f *Faults) total() float64 {
	t := f.Reset + f.Stall + f.Malformed + f.Truncate
	for _, p := range f.Errors {
		t += p
	}
	return t
}

func (f *Faults) validate() error {
	if t := f.total(); t > 1+1e-9 {
		return fmt.Errorf("faults: probabilities sum to %g, more than 1", t)
	}
	return nil
}

// String writes the faults back in ParseFaults' syntax.
func (f Faults) String() string {
	var parts []string
	codes := make([]int, 0, len(f.Errors))
	for c := range f.Errors {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d=%g", c, f.Errors[c]))
	}
	for _, kv := range []struct {
		k string
		v float64
	}{{"reset", f.Reset}, {"stall", f.Stall}, {"malformed", f.Malformed}, {"truncate", f.Truncate}} {
		if kv.v > 0 {
			parts = append(parts, fmt.Sprintf("%s=%g", kv.k, kv.v))
		}
	}
	return strings.Join(parts, ",")
}

// OptionsFrom maps the run config's generate.sim section to Options.
func OptionsFrom(cfg Config) Options {
	o := Options{
		Seed:        cfg.Seed,
		Preset:      cfg.Preset,
		Accuracy:    cfg.Accuracy,
		Keep:        cfg.Keep,
		TimeScale:   cfg.TimeScale,
		Capacity:    cfg.Capacity,
		MaxModelLen: cfg.MaxModelLen,
		EnvDelay:    cfg.EnvDelay.D(),
		ObsTokens:   cfg.ObsTokens,
		MoE:         cfg.MoE,

		StripReasoning: cfg.StripReasoning,
	}
	if len(cfg.Turns) == 2 {
		o.MinTurns, o.MaxTurns = cfg.Turns[0], cfg.Turns[1]
	}
	return o
}

// resolved fills defaults.
func (o Options) resolved() Options {
	if o.Preset == "" {
		o.Preset = "short"
	}
	if o.Length.Median <= 0 {
		lm, ok := Presets[o.Preset]
		if !ok {
			lm = Presets["short"]
		}
		o.Length = lm
	}
	if o.Length.Cap <= 0 {
		o.Length.Cap = 16384
	}
	o.Length.Rho = math.Min(math.Max(o.Length.Rho, 0), 1)
	switch {
	case o.Accuracy == 0:
		o.Accuracy = 0.6
	case o.Accuracy < 0:
		o.Accuracy = 0
	case o.Accuracy > 1:
		o.Accuracy = 1
	}
	if o.Capacity <= 0 {
		o.Capacity = 256
	}
	if o.A == 0 {
		o.A = 4500 * time.Microsecond
	}
	if o.C == 0 {
		o.C = 45 * time.Microsecond
	}
	if o.P == 0 {
		o.P = 30 * time.Microsecond
	}
	agent := o.Preset == "agent"
	if o.MinTurns <= 0 {
		o.MinTurns = 1
		if agent {
			o.MinTurns = 2
		}
	}
	if o.MaxTurns <= 0 {
		o.MaxTurns = 1
		if agent {
			o.MaxTurns = 8
		}
	}
	if o.MaxTurns < o.MinTurns {
		o.MaxTurns = o.MinTurns
	}
	if o.EnvDelay == 0 && agent {
		o.EnvDelay = 500 * time.Millisecond
	}
	if o.ObsTokens == 0 && agent {
		o.ObsTokens = 150
	}
	switch {
	case o.ToolCallRate == 0:
		o.ToolCallRate = 0.5
	case o.ToolCallRate < 0:
		o.ToolCallRate = 0
	}
	if o.Model == "" {
		o.Model = "sim"
	}
	if o.Faults.RetryAfter == 0 {
		o.Faults.RetryAfter = time.Second
	}
	if o.Faults.StallFor == 0 {
		o.Faults.StallFor = 2 * time.Second
	}
	if o.Faults.Seed == 0 {
		o.Faults.Seed = o.Seed
	}
	return o
}
